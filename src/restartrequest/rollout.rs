//! `inplaced restart --selector`: every matching pod restarted in place, batch by batch. A pod
//! counts as unavailable from its request's creation until it is ready again; a batch starts only
//! once the previous one is ready; matching pods already unready count against
//! `--max-unavailable`; no batch takes a PodDisruptionBudget below what it requires (computed
//! from the budget's spec and the pods' Ready conditions, as the disruption controller computes
//! it for pods without a scalable owner); the first failed request stops the rollout.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ::kube::api::{Api, DynamicObject, ListParams, PostParams};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::rollout::budget::{Budget, PodState};

use super::cli::{Ask, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TIMEOUT, POLL, Shown};
use super::request::{RestartPhase, RestartRequest};

/// `--max-unavailable`: a number of pods or a percentage of the matching pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    Percent(u32),
}

impl MaxUnavailable {
    pub fn parse(text: &str) -> Result<MaxUnavailable, String> {
        let parsed = match text.strip_suffix('%') {
            Some(percent) => percent
                .parse::<u32>()
                .ok()
                .filter(|p| (1..=100).contains(p))
                .map(MaxUnavailable::Percent),
            None => text
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(MaxUnavailable::Count),
        };
        parsed.ok_or_else(|| {
            format!(
                "{text:?} is neither a positive number of pods nor a percentage from 1% to 100%"
            )
        })
    }

    /// How many of `total` pods: a percentage rounds down (as a Deployment's maxUnavailable
    /// does), but never to nothing, or the rollout could not start.
    pub fn of(self, total: usize) -> usize {
        match self {
            MaxUnavailable::Count(n) => n as usize,
            MaxUnavailable::Percent(p) => (total * p as usize / 100).max(1),
        }
    }
}

/// The pods of `todo` (in order) that may be restarted now, or why none may. `matching` are
/// the pods of the selector, `namespace_pods` every pod of the namespace (for the budgets).
pub(super) fn next_batch<'a>(
    todo: &[&'a PodState],
    matching: &[PodState],
    namespace_pods: &[PodState],
    max_unavailable: usize,
    budgets: &[Budget],
) -> Result<Vec<&'a PodState>, String> {
    let unready = matching.iter().filter(|p| !p.ready).count();
    let room = max_unavailable.saturating_sub(unready);
    if room == 0 {
        return Err(format!(
            "{unready} of the matching pods are not ready (--max-unavailable {max_unavailable}): waiting"
        ));
    }
    let mut allowance: HashMap<&str, (usize, usize)> = HashMap::new();
    for budget in budgets {
        let busy = HashSet::new();
        allowance.insert(
            &budget.name,
            budget.healthy_and_required(namespace_pods, &busy)?,
        );
    }
    let mut batch = Vec::new();
    let mut blocked_by = None;
    for pod in todo.iter().copied() {
        if batch.len() == room {
            break;
        }
        if !pod.ready {
            continue;
        }
        let covering: Vec<&Budget> = budgets.iter().filter(|b| b.covers(pod)).collect();
        let blocking = covering.iter().find(|b| {
            allowance
                .get(b.name.as_str())
                .is_some_and(|(healthy, required)| healthy <= required)
        });
        if let Some(budget) = blocking {
            blocked_by.get_or_insert(budget.name.as_str());
            continue;
        }
        for budget in covering {
            if let Some((healthy, _)) = allowance.get_mut(budget.name.as_str()) {
                *healthy -= 1;
            }
        }
        batch.push(pod);
    }
    if !batch.is_empty() {
        return Ok(batch);
    }
    if let Some(name) = blocked_by {
        let (healthy, required) = allowance.get(name).copied().unwrap_or_default();
        return Err(format!(
            "PodDisruptionBudget {name} allows no disruption now ({healthy} healthy, {required} required): waiting"
        ));
    }
    let names: Vec<&str> = todo.iter().map(|p| p.name.as_str()).collect();
    Err(format!(
        "waiting for {} to be ready before restarting {}",
        names.join(", "),
        if names.len() == 1 { "it" } else { "them" }
    ))
}

pub(super) struct Rollout {
    pub client: ::kube::Client,
    pub namespace: String,
    pub selector: String,
    pub max_unavailable: MaxUnavailable,
    pub ask: Ask,
    /// How long the rollout may go without progress (a batch started or finished).
    pub timeout: Duration,
}

/// A request of the rollout not finished yet.
struct InFlight {
    pod: String,
    pod_uid: String,
    request: String,
}

pub(super) async fn run(rollout: Rollout) -> anyhow::Result<u8> {
    let ns = &rollout.namespace;
    let pods: Api<Pod> = Api::namespaced(rollout.client.clone(), ns);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(rollout.client.clone(), ns);
    let requests: Api<DynamicObject> = Api::namespaced_with(
        rollout.client.clone(),
        ns,
        &super::restart_request_resource(),
    );
    let by_selector = ListParams::default().labels(&rollout.selector);
    let listed = pods.list(&by_selector).await?;
    let mut todo: Vec<PodState> = listed
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(PodState::of)
        .collect();
    todo.sort_by(|a, b| a.name.cmp(&b.name));
    if todo.is_empty() {
        eprintln!(
            "no pod of namespace {ns} matches {:?}: nothing to restart",
            rollout.selector
        );
        return Ok(EXIT_FAILED);
    }
    let total = todo.len();
    let max = rollout.max_unavailable.of(total);
    println!("restarting {total} pods in place, at most {max} unavailable at once");
    let mut in_flight: Vec<InFlight> = Vec::new();
    let mut restarted = 0usize;
    let mut shown = Shown::default();
    let mut last_progress = Instant::now();
    let mut waiting: Option<String> = None;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let matching: Vec<PodState> = pods
            .list(&by_selector)
            .await?
            .items
            .iter()
            .map(PodState::of)
            .collect();
        let mut still = Vec::new();
        for flight in in_flight.drain(..) {
            let object = requests.get(&flight.request).await?;
            let request = RestartRequest::from_object(&object).map_err(anyhow::Error::msg)?;
            shown.print(&request);
            match request.status.phase {
                RestartPhase::Failed => {
                    eprintln!(
                        "rollout stopped: pod {} was not restarted: {}",
                        flight.pod,
                        request
                            .status
                            .message
                            .as_deref()
                            .unwrap_or("its request failed")
                    );
                    eprintln!("{restarted} of {total} pods restarted; no further request was made");
                    return Ok(EXIT_FAILED);
                }
                RestartPhase::Succeeded
                    if matching.iter().any(|p| p.uid == flight.pod_uid && p.ready) =>
                {
                    restarted += 1;
                    last_progress = Instant::now();
                    println!(
                        "pod/{} restarted and ready ({restarted}/{total})",
                        flight.pod
                    );
                }
                _ => still.push(flight),
            }
        }
        in_flight = still;
        if in_flight.is_empty() {
            // Pods deleted or replaced since the start are not this rollout's any more.
            todo.retain(|pod| {
                let present = matching.iter().any(|p| p.uid == pod.uid);
                if !present {
                    println!("pod/{} is gone or was replaced: skipped", pod.name);
                }
                present
            });
            if todo.is_empty() {
                println!("{restarted} of {total} pods restarted in place");
                return Ok(0);
            }
            let pdbs = budgets.list(&ListParams::default()).await?;
            let mut read = Vec::new();
            for pdb in &pdbs.items {
                match Budget::of(pdb) {
                    Ok(budget) => read.push(budget),
                    Err(message) => {
                        eprintln!("error: {message}");
                        return Ok(EXIT_FAILED);
                    }
                }
            }
            let namespace_pods: Vec<PodState> = if read.is_empty() {
                Vec::new()
            } else {
                pods.list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .map(PodState::of)
                    .collect()
            };
            let current: Vec<PodState> = todo
                .iter()
                .filter_map(|t| matching.iter().find(|p| p.uid == t.uid).cloned())
                .collect();
            let candidates: Vec<&PodState> = current.iter().collect();
            match next_batch(&candidates, &matching, &namespace_pods, max, &read) {
                Ok(batch) => {
                    waiting = None;
                    for pod in batch {
                        // One POST per request: a request is made whole or not at all, and an
                        // interrupt is only heard between them.
                        let api_pod = pods.get(&pod.name).await?;
                        if api_pod.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
                            continue;
                        }
                        let object = ask_request(&rollout.ask, &api_pod)?;
                        let created = requests.create(&PostParams::default(), &object).await?;
                        let name = created.metadata.name.unwrap_or_default();
                        println!("pod/{}: containerrestartrequest/{name} created", pod.name);
                        in_flight.push(InFlight {
                            pod: pod.name.clone(),
                            pod_uid: pod.uid.clone(),
                            request: name,
                        });
                        todo.retain(|t| t.uid != pod.uid);
                    }
                    last_progress = Instant::now();
                }
                Err(reason) => {
                    if waiting.as_ref() != Some(&reason) {
                        println!("{reason}");
                        waiting = Some(reason);
                    }
                }
            }
        }
        if last_progress.elapsed() > rollout.timeout {
            eprintln!(
                "no progress for {}: {}",
                humantime::format_duration(rollout.timeout),
                waiting
                    .as_deref()
                    .unwrap_or("the requests under way did not finish")
            );
            report_left(restarted, total, &in_flight);
            return Ok(EXIT_TIMEOUT);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = &mut interrupted => {
                eprintln!("interrupted: no further request is made");
                report_left(restarted, total, &in_flight);
                return Ok(EXIT_INTERRUPTED);
            }
        }
    }
}

fn ask_request(ask: &Ask, pod: &Pod) -> anyhow::Result<DynamicObject> {
    ask.request_for(pod).map_err(anyhow::Error::msg)
}

fn report_left(restarted: usize, total: usize, in_flight: &[InFlight]) {
    eprintln!("{restarted} of {total} pods restarted");
    for flight in in_flight {
        eprintln!(
            "  pod/{}: containerrestartrequest/{} is still under way; the agent finishes it",
            flight.pod, flight.request
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, app: &str, ready: bool) -> PodState {
        PodState {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: [("app".to_string(), app.to_string())].into(),
            ready,
        }
    }

    fn budget(spec: serde_json::Value) -> Budget {
        let pdb: PodDisruptionBudget =
            serde_json::from_value(json!({"metadata": {"name": "pdb"}, "spec": spec})).unwrap();
        Budget::of(&pdb).unwrap()
    }

    fn names(batch: &[&PodState]) -> Vec<String> {
        batch.iter().map(|p| p.name.clone()).collect()
    }

    #[test]
    fn max_unavailable_parses_and_scales() {
        assert_eq!(MaxUnavailable::parse("3"), Ok(MaxUnavailable::Count(3)));
        assert_eq!(
            MaxUnavailable::parse("25%"),
            Ok(MaxUnavailable::Percent(25))
        );
        for bad in ["0", "0%", "101%", "-1", "x", "2.5", ""] {
            assert!(MaxUnavailable::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(MaxUnavailable::Percent(25).of(10), 2);
        assert_eq!(MaxUnavailable::Percent(5).of(10), 1);
        assert_eq!(MaxUnavailable::Count(3).of(2), 3);
    }

    #[test]
    fn batches_respect_max_unavailable_and_unready_pods() {
        let all: Vec<PodState> = (0..10)
            .map(|i| pod(&format!("p{i}"), "web", true))
            .collect();
        let todo: Vec<&PodState> = all.iter().collect();
        let batch = next_batch(&todo, &all, &[], 3, &[]).unwrap();
        assert_eq!(names(&batch), ["p0", "p1", "p2"]);
        let mut one_down = all.clone();
        one_down[9].ready = false;
        let todo: Vec<&PodState> = one_down.iter().collect();
        let batch = next_batch(&todo, &one_down, &[], 3, &[]).unwrap();
        assert_eq!(batch.len(), 2, "an unready pod counts against the budget");
        let err = next_batch(&todo, &one_down, &[], 1, &[]).unwrap_err();
        assert!(
            err.contains("1 of the matching pods are not ready"),
            "{err}"
        );
        // Only unready pods left to do: they are waited for, not restarted.
        let last = [&one_down[9]];
        let err = next_batch(&last, &one_down, &[], 3, &[]).unwrap_err();
        assert!(err.contains("waiting for p9 to be ready"), "{err}");
    }

    #[test]
    fn a_disruption_budget_caps_or_blocks_a_batch() {
        let all: Vec<PodState> = (0..10)
            .map(|i| pod(&format!("p{i}"), "web", true))
            .collect();
        let todo: Vec<&PodState> = all.iter().collect();
        let nine = budget(json!({"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 9}));
        assert_eq!(next_batch(&todo, &all, &all, 3, &[nine]).unwrap().len(), 1);
        let all_of_them =
            budget(json!({"selector": {"matchLabels": {"app": "web"}}, "minAvailable": "100%"}));
        let err = next_batch(&todo, &all, &all, 3, &[all_of_them]).unwrap_err();
        assert!(
            err.contains(
                "PodDisruptionBudget pdb allows no disruption now (10 healthy, 10 required)"
            ),
            "{err}"
        );
        let max_two =
            budget(json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": "20%"}));
        assert_eq!(
            next_batch(&todo, &all, &all, 3, &[max_two]).unwrap().len(),
            2
        );
        // A budget of other pods does not limit these; an empty selector covers every pod.
        let other = budget(json!({"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1}));
        assert_eq!(next_batch(&todo, &all, &all, 3, &[other]).unwrap().len(), 3);
        let everyone = budget(json!({"minAvailable": 8}));
        assert_eq!(
            next_batch(&todo, &all, &all, 3, &[everyone]).unwrap().len(),
            2
        );
        // Pods of the namespace outside the rollout count for the budget too.
        let mut namespace = all.clone();
        namespace.push(pod("db-0", "db", false));
        let nine_of_all = budget(json!({"minAvailable": 9}));
        let batch = next_batch(&todo, &all, &namespace, 3, &[nine_of_all]).unwrap();
        assert_eq!(batch.len(), 1, "10 healthy of 11, 9 required");
        let ten_of_all = budget(json!({"minAvailable": 10}));
        let err = next_batch(&todo, &all, &namespace, 3, &[ten_of_all]).unwrap_err();
        assert!(err.contains("(10 healthy, 10 required)"), "{err}");
    }
}
