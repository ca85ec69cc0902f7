//! The rollout leader's pass over one rollout, decided from facts alone (no I/O): every node's
//! claims followed to their end, the claims of agents that are gone released, new claims within
//! the budget (taken in turn from the nodes whose agent is alive), the end, and the summary.
//! One agent per namespace leads (it holds the namespace's Lease `inplaced-rollout-leader`) and
//! writes the result with the resourceVersion it was decided from: even two agents that both
//! believe they lead (one taking over from another) decide each claim from the claims before it,
//! because the API server orders their writes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::budget::{Budget, PodState};
use super::object::{
    Claim, Condition, Failure, NodePart, RolloutPhase, RolloutSpec, RolloutStatus,
};

/// How long an agent's Lease lasts without renewal; an agent is gone once it has lapsed.
pub(crate) const LEASE_DURATION: Duration = Duration::from_secs(40);
/// Nodes named in the `WaitingForNodes` condition's message (the count says the rest).
const NODES_NAMED: usize = 5;

pub(crate) const CONDITION_COMPLETE: &str = "Complete";
pub(crate) const CONDITION_FAILED: &str = "Failed";
pub(crate) const CONDITION_WAITING: &str = "WaitingForNodes";

/// A pod as the rollout sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutPod {
    pub state: PodState,
    pub node: String,
    pub created: Option<Timestamp>,
    pub terminating: bool,
}

/// How a request of the rollout stands (a pod without one has none in [`Requests`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RequestOutcome {
    Underway,
    Succeeded,
    Failed(String),
}

/// A request of the rollout: the record that its pod was restarted (or is being), which
/// outlives the pod and every agent.
#[derive(Clone, Debug, PartialEq)]
pub struct Asked {
    /// The node its agent made it for (its label).
    pub node: String,
    pub pod: String,
    pub outcome: RequestOutcome,
}

/// Every request of the rollout, by pod UID.
pub type Requests = HashMap<String, Asked>;

/// The rollout's namespace over every node, as the leader's watches show it (none before they
/// have listed: nothing is decided then).
#[derive(Clone, Debug, Default)]
pub struct Census {
    /// The pods matching the selector, on every node (shared with the watch's copy: a census
    /// is taken on every pass).
    pub matching: Vec<Arc<RolloutPod>>,
    pub budgets: Vec<Budget>,
    /// Every pod of the namespace (for the budgets; empty without budgets).
    pub namespace_pods: Vec<PodState>,
    /// Nodes whose agent holds an unexpired Lease: only their pods are claimed.
    pub live_agents: HashSet<String>,
}

pub struct Facts<'a> {
    pub now: Timestamp,
    pub generation: Option<i64>,
    pub spec: &'a RolloutSpec,
    pub status: &'a RolloutStatus,
    pub census: &'a Census,
    /// Every request of the rollout, as the leader's request watch shows them once it has
    /// listed: a pod without one has not been asked to restart.
    pub requests: &'a Requests,
}

/// What one pass decided.
#[derive(Debug, PartialEq)]
pub struct Decision {
    /// The status to write (the same as read: nothing to write).
    pub status: RolloutStatus,
    /// Claims made in this pass (in the status's parts): each node's agent makes their
    /// requests once it reads them.
    pub claimed: Vec<Claim>,
    /// Why nothing (more) is claimed now while pods are left to restart.
    pub waiting: Option<String>,
}

fn age(claim: &Claim, now: Timestamp) -> Duration {
    let since = claim
        .since
        .parse::<Timestamp>()
        .map_or(0, |t| t.as_second());
    Duration::from_secs(now.as_second().saturating_sub(since).max(0) as u64)
}

/// A claim young enough for its node's agent to make its request. The leader lets a claim
/// without a request go only after twice as long, so that a request made just in time (read
/// late by the leader's watch) never meets a claim released under it.
pub fn fresh(claim: &Claim, now: Timestamp) -> bool {
    age(claim, now) < LEASE_DURATION
}

fn included(pod: &RolloutPod, start: Option<Timestamp>) -> bool {
    match (pod.created, start) {
        (Some(created), Some(start)) => created <= start,
        _ => true,
    }
}

/// The leader's pass over the rollout.
pub fn decide(facts: &Facts) -> Decision {
    let mut status = facts.status.clone();
    let now = facts.now;
    if status.start_time.is_none() {
        status.start_time = Some(seconds(now));
    }
    let start = status.start();
    follow_claims(&mut status, facts);
    record_outcomes(&mut status, facts.requests);
    if !status.phase.is_final() {
        advance_phase(&mut status, facts.spec, start, now);
    }
    let mut left = pods_left_to_claim(facts, &status, start);
    let (claimed, waiting) = claim_or_wait(facts, &mut status, &mut left);
    if !status.phase.is_final() {
        conclude(&mut status, facts, start, &left);
    }
    summarize(&mut status, facts.generation);
    let any_left = left.values().any(|pods| !pods.is_empty());
    Decision {
        status,
        claimed,
        waiting: if any_left { waiting } else { None },
    }
}

/// Every node's claims followed to their end: a finished request is the pod's record; a pod
/// gone (or replaced) is skipped; a claim whose request was never made is let go once its
/// node's agent can no longer make it (for an agent that is gone, once the pod is ready too).
/// A claim whose request is under way keeps the budget: its agent may yet stop the pod.
fn follow_claims(status: &mut RolloutStatus, facts: &Facts) {
    let pods: HashMap<&str, &RolloutPod> = facts
        .census
        .matching
        .iter()
        .map(|p| (p.state.uid.as_str(), p.as_ref()))
        .collect();
    for part in status.nodes.iter_mut() {
        let alive = facts.census.live_agents.contains(&part.node);
        let mut skipped = 0;
        part.claims.retain(|claim| {
            let outcome = facts.requests.get(&claim.pod_uid).map(|r| &r.outcome);
            if matches!(
                outcome,
                Some(RequestOutcome::Succeeded | RequestOutcome::Failed(_))
            ) {
                return false;
            }
            let Some(pod) = pods.get(claim.pod_uid.as_str()) else {
                skipped += 1;
                return false;
            };
            outcome.is_some()
                || age(claim, facts.now) < 2 * LEASE_DURATION
                || (!alive && !pod.state.ready)
        });
        part.skipped += skipped;
    }
}

/// The done count and every node's failures, from every request of the rollout.
fn record_outcomes(status: &mut RolloutStatus, requests: &Requests) {
    status.done = requests
        .values()
        .filter(|r| r.outcome == RequestOutcome::Succeeded)
        .count() as u32;
    for part in status.nodes.iter_mut() {
        part.failures.clear();
    }
    for (uid, asked) in requests {
        if let RequestOutcome::Failed(message) = &asked.outcome {
            part_mut(status, &asked.node)
                .failures
                .push(Failure::new(&asked.pod, uid, message));
        }
    }
    for part in status.nodes.iter_mut() {
        part.failures
            .sort_by(|a, b| (&a.pod, &a.pod_uid).cmp(&(&b.pod, &b.pod_uid)));
    }
}

/// The phase of an unfinished rollout: failed with too many failures or past its deadline,
/// else paused or progressing as the spec says.
fn advance_phase(
    status: &mut RolloutStatus,
    spec: &RolloutSpec,
    start: Option<Timestamp>,
    now: Timestamp,
) {
    let failed: usize = status.nodes.iter().map(|p| p.failures.len()).sum();
    let deadline = spec
        .deadline_seconds
        .and_then(|d| start.map(|s| (s, d)))
        .filter(|(s, d)| now.as_second() >= s.as_second().saturating_add(*d));
    if failed >= spec.max_failed_pods() as usize {
        let message = first_failures(status);
        finish(status, RolloutPhase::Failed, "PodsFailed", message, now);
    } else if let Some((_, seconds)) = deadline {
        finish(
            status,
            RolloutPhase::Failed,
            "DeadlineExceeded",
            format!("not finished within spec.deadlineSeconds ({seconds} s)"),
            now,
        );
    } else {
        status.phase = if spec.paused {
            RolloutPhase::Paused
        } else {
            RolloutPhase::Progressing
        };
    }
}

/// Each node's pods left to restart (included, not terminating, unclaimed, without a
/// request), in name order; every node, whether its agent is alive or not.
fn pods_left_to_claim<'a>(
    facts: &Facts<'a>,
    status: &RolloutStatus,
    start: Option<Timestamp>,
) -> BTreeMap<String, Vec<&'a RolloutPod>> {
    let claimed: HashSet<&str> = status.claims().map(|(_, c)| c.pod_uid.as_str()).collect();
    let mut left: BTreeMap<String, Vec<&RolloutPod>> = BTreeMap::new();
    for pod in &facts.census.matching {
        let uid = pod.state.uid.as_str();
        if included(pod, start)
            && !pod.terminating
            && !claimed.contains(uid)
            && !facts.requests.contains_key(uid)
        {
            left.entry(pod.node.clone()).or_default().push(pod);
        }
    }
    for pods in left.values_mut() {
        pods.sort_by(|a, b| a.state.name.cmp(&b.state.name));
    }
    left
}

/// Claims while the rollout progresses, taken in turn from each node whose agent is alive
/// (one pod of each, then a second of each...) and written in the nodes' parts; `left` loses
/// the pods claimed. With them, why nothing (more) is claimed now.
fn claim_or_wait(
    facts: &Facts,
    status: &mut RolloutStatus,
    left: &mut BTreeMap<String, Vec<&RolloutPod>>,
) -> (Vec<Claim>, Option<String>) {
    for part in status.nodes.iter_mut() {
        part.waiting = None;
    }
    let live = &facts.census.live_agents;
    let in_turn = in_turn(left.iter().filter(|(node, _)| live.contains(*node)));
    if status.phase != RolloutPhase::Progressing || in_turn.is_empty() {
        return (Vec::new(), None);
    }
    match claim(facts, status, &in_turn) {
        Ok(claimed) => {
            let uids: HashSet<&str> = claimed.iter().map(|(_, c)| c.pod_uid.as_str()).collect();
            for pods in left.values_mut() {
                pods.retain(|p| !uids.contains(p.state.uid.as_str()));
            }
            let mut out = Vec::new();
            for (node, claim) in claimed {
                part_mut(status, &node).claims.push(claim.clone());
                out.push(claim);
            }
            (out, None)
        }
        Err(Waiting::BudgetInUse(reason)) => (Vec::new(), Some(reason)),
        Err(Waiting::Blocked(reason)) => {
            for (node, pods) in left.iter() {
                if !pods.is_empty() && live.contains(node) {
                    part_mut(status, node).waiting = Some(reason.clone());
                }
            }
            (Vec::new(), Some(reason))
        }
    }
}

/// The nodes' pods interleaved: the first of each node, then the second of each, and so on,
/// so that the budget is spread over the nodes rather than spent on the first ones.
fn in_turn<'a, 'b>(
    nodes: impl Iterator<Item = (&'b String, &'b Vec<&'a RolloutPod>)>,
) -> Vec<&'a RolloutPod>
where
    'a: 'b,
{
    let lists: Vec<&Vec<&RolloutPod>> = nodes.map(|(_, pods)| pods).collect();
    let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| lists.iter().filter_map(move |l| l.get(i).copied()))
        .collect()
}

/// Why nothing is claimed now.
enum Waiting {
    /// The rollout's budget is in use: the usual state of a rollout, not written down.
    BudgetInUse(String),
    /// Something the user may need to act on (a PodDisruptionBudget, unready pods): written in
    /// the parts of the nodes that wait.
    Blocked(String),
}

/// New claims, by node: as many of `candidates` (ready ones, in the order given) as the budget
/// leaves room for, counting every node's claims and the matching pods that are unready
/// unclaimed, and as every covering PodDisruptionBudget allows.
fn claim(
    facts: &Facts,
    status: &RolloutStatus,
    candidates: &[&RolloutPod],
) -> Result<Vec<(String, Claim)>, Waiting> {
    let census = facts.census;
    let max = facts.spec.max_unavailable_of(census.matching.len());
    let claimed: HashSet<&str> = status.claims().map(|(_, c)| c.pod_uid.as_str()).collect();
    let unready = census
        .matching
        .iter()
        .filter(|p| !p.state.ready && !claimed.contains(p.state.uid.as_str()))
        .count();
    let unavailable = claimed.len() + unready;
    let room = max.saturating_sub(unavailable);
    if room == 0 {
        return Err(Waiting::BudgetInUse(format!(
            "{unavailable} of {max} allowed unavailable ({} restarting, {unready} unready)",
            claimed.len()
        )));
    }
    let mut allowance: HashMap<&str, (usize, usize)> = HashMap::new();
    for budget in &census.budgets {
        allowance.insert(
            &budget.name,
            budget
                .healthy_and_required(&census.namespace_pods, &claimed)
                .map_err(|e| Waiting::Blocked(e.to_string()))?,
        );
    }
    let mut out = Vec::new();
    let mut blocked_by = None;
    for pod in candidates {
        if out.len() == room {
            break;
        }
        if !pod.state.ready {
            continue;
        }
        let covering: Vec<&Budget> = census
            .budgets
            .iter()
            .filter(|b| b.covers(&pod.state))
            .collect();
        if let Some(budget) = covering.iter().find(|b| {
            allowance
                .get(b.name.as_str())
                .is_some_and(|(healthy, required)| healthy <= required)
        }) {
            blocked_by.get_or_insert(budget.name.as_str());
            continue;
        }
        for budget in covering {
            if let Some((healthy, _)) = allowance.get_mut(budget.name.as_str()) {
                *healthy -= 1;
            }
        }
        let claim = Claim {
            pod: pod.state.name.clone(),
            pod_uid: pod.state.uid.clone(),
            since: seconds(facts.now),
        };
        out.push((pod.node.clone(), claim));
    }
    if !out.is_empty() {
        return Ok(out);
    }
    match blocked_by {
        Some(name) => {
            let (healthy, required) = allowance.get(name).copied().unwrap_or_default();
            Err(Waiting::Blocked(format!(
                "PodDisruptionBudget {name} allows no disruption ({healthy} healthy, {required} required)"
            )))
        }
        None => Err(Waiting::Blocked(
            "the pods left are not ready: waiting for them".into(),
        )),
    }
}

/// The rollout's size, the nodes it waits on, and its end: no pod left on any node and no
/// claim held.
fn conclude(
    status: &mut RolloutStatus,
    facts: &Facts,
    start: Option<Timestamp>,
    left: &BTreeMap<String, Vec<&RolloutPod>>,
) {
    let census = facts.census;
    let here: HashSet<&str> = census
        .matching
        .iter()
        .map(|p| p.state.uid.as_str())
        .collect();
    let included_here = census
        .matching
        .iter()
        .filter(|p| included(p, start))
        .count();
    // A pod being deleted that was never asked is as good as gone (whether its deletion has
    // completed yet or not); one restarted (or being) and gone since is the rollout's too.
    let ours = census
        .matching
        .iter()
        .filter(|p| included(p, start))
        .filter(|p| !p.terminating || facts.requests.contains_key(&p.state.uid))
        .count();
    let gone_since = facts
        .requests
        .keys()
        .filter(|uid| !here.contains(uid.as_str()))
        .count();
    status.matched = (ours + gone_since) as u32;
    status.not_included = (census.matching.len() - included_here) as u32;
    report_nodes_without_agent(status, census, start, left, facts.now);
    let any_left = left.values().any(|pods| !pods.is_empty());
    let any_claims = status.claims().next().is_some();
    if !any_left && !any_claims && status.phase == RolloutPhase::Progressing {
        let failed: usize = status.nodes.iter().map(|p| p.failures.len()).sum();
        let message = if failed == 0 {
            "every pod restarted".to_string()
        } else {
            format!(
                "every pod restarted but {failed} (within spec.failurePolicy): {}",
                first_failures(status)
            )
        };
        finish(
            status,
            RolloutPhase::Succeeded,
            "Restarted",
            message,
            facts.now,
        );
    }
}

/// The `WaitingForNodes` condition (and message): the nodes with pods left whose agent is
/// gone or never came.
fn report_nodes_without_agent(
    status: &mut RolloutStatus,
    census: &Census,
    start: Option<Timestamp>,
    left: &BTreeMap<String, Vec<&RolloutPod>>,
    now: Timestamp,
) {
    // An agent has the Lease's duration from the start to take its part up.
    let grace_over =
        start.is_some_and(|s| now.as_second() >= s.as_second() + LEASE_DURATION.as_secs() as i64);
    let without_agent: Vec<(&str, usize)> = left
        .iter()
        .filter(|(name, pods)| {
            grace_over && !pods.is_empty() && !census.live_agents.contains(*name)
        })
        .map(|(name, pods)| (name.as_str(), pods.len()))
        .collect();
    if without_agent.is_empty() {
        set_condition(
            status,
            CONDITION_WAITING,
            false,
            "AllNodesHaveAgents",
            "",
            now,
        );
        return;
    }
    let mut named: Vec<String> = without_agent
        .iter()
        .take(NODES_NAMED)
        .map(|(node, count)| format!("waiting for node {node}: no agent ({count} pods)"))
        .collect();
    if without_agent.len() > NODES_NAMED {
        named.push(format!(
            "and {} more nodes",
            without_agent.len() - NODES_NAMED
        ));
    }
    set_condition(
        status,
        CONDITION_WAITING,
        true,
        "NoAgent",
        &named.join("; "),
        now,
    );
    status.message = Some(named.join("; "));
}

fn finish(
    status: &mut RolloutStatus,
    phase: RolloutPhase,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    status.phase = phase;
    status.completion_time = Some(seconds(now));
    let succeeded = phase == RolloutPhase::Succeeded;
    set_condition(status, CONDITION_COMPLETE, succeeded, reason, &message, now);
    set_condition(status, CONDITION_FAILED, !succeeded, reason, &message, now);
    status.message = Some(message);
}

fn first_failures(status: &RolloutStatus) -> String {
    let failures: Vec<&Failure> = status.nodes.iter().flat_map(|p| &p.failures).collect();
    let mut text: Vec<String> = failures
        .iter()
        .take(3)
        .map(|f| format!("pod {}: {}", f.pod, f.message))
        .collect();
    if failures.len() > 3 {
        text.push(format!("and {} more", failures.len() - 3));
    }
    format!(
        "{} pods failed to restart: {}",
        failures.len(),
        text.join("; ")
    )
}

fn set_condition(
    status: &mut RolloutStatus,
    type_: &str,
    on: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = if on { "True" } else { "False" };
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = seconds(now);
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message.into();
        }
        // A condition that was never true is not written as false.
        None if on => status.conditions.push(Condition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: seconds(now),
        }),
        None => {}
    }
}

/// The counts, and only the parts that say something: every write goes to every agent's
/// watch, so a part with nothing to say is not written.
fn summarize(status: &mut RolloutStatus, generation: Option<i64>) {
    status.observed_generation = generation;
    status.nodes.retain(|p| {
        !p.claims.is_empty() || !p.failures.is_empty() || p.skipped > 0 || p.waiting.is_some()
    });
    status.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    status.failed = status.nodes.iter().map(|p| p.failures.len() as u32).sum();
    status.in_progress = status.nodes.iter().map(|p| p.claims.len() as u32).sum();
    if status.phase == RolloutPhase::Progressing || status.phase == RolloutPhase::Paused {
        let waiting = status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_WAITING && c.status == "True");
        if !waiting {
            status.message = None;
        }
    }
}

/// The part of `node`, added if it has none.
fn part_mut<'s>(status: &'s mut RolloutStatus, node: &str) -> &'s mut NodePart {
    match status.nodes.iter().position(|p| p.node == node) {
        Some(i) => &mut status.nodes[i],
        None => {
            status.nodes.push(NodePart {
                node: node.to_string(),
                ..Default::default()
            });
            let last = status.nodes.len() - 1;
            &mut status.nodes[last]
        }
    }
}

/// RFC 3339 at one-second resolution, as the API's timestamps.
fn seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::object::RolloutSpec;
    use serde_json::json;

    const START: &str = "2026-11-29T08:00:00Z";

    fn at(seconds_after_start: i64) -> Timestamp {
        Timestamp::from_second(
            START.parse::<Timestamp>().unwrap().as_second() + seconds_after_start,
        )
        .unwrap()
    }

    fn spec(extra: serde_json::Value) -> RolloutSpec {
        let mut value = json!({"selector": {"matchLabels": {"app": "web"}}});
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                value[k] = v.clone();
            }
        }
        serde_json::from_value(value).unwrap()
    }

    fn pod(name: &str, node: &str, ready: bool) -> RolloutPod {
        RolloutPod {
            state: PodState {
                name: name.into(),
                uid: format!("uid-{name}"),
                labels: [("app".to_string(), "web".to_string())].into(),
                ready,
            },
            node: node.into(),
            created: Some(at(-60)),
            terminating: false,
        }
    }

    fn started() -> RolloutStatus {
        RolloutStatus {
            phase: RolloutPhase::Progressing,
            start_time: Some(START.into()),
            ..Default::default()
        }
    }

    fn claim_of(name: &str, since: &str) -> Claim {
        Claim {
            pod: name.into(),
            pod_uid: format!("uid-{name}"),
            since: since.into(),
        }
    }

    /// The leader's facts, as its watches would show them.
    struct Run {
        now: Timestamp,
        spec: RolloutSpec,
        status: RolloutStatus,
        pods: Vec<RolloutPod>,
        live: Vec<&'static str>,
        requests: Requests,
        budgets: Vec<Budget>,
    }

    impl Run {
        fn new(all: &[RolloutPod]) -> Run {
            Run {
                now: at(1),
                spec: spec(json!({})),
                status: started(),
                pods: all.to_vec(),
                live: vec!["a", "b", "c"],
                requests: Requests::new(),
                budgets: Vec::new(),
            }
        }

        /// The request for the pod `uid` (`uid-<pod>`) stands so; made on the pod's node (`a`
        /// for a pod gone).
        fn ask(&mut self, uid: &str, outcome: RequestOutcome) {
            let pod = uid.trim_start_matches("uid-").to_string();
            let node = self
                .pods
                .iter()
                .find(|p| p.state.uid == uid)
                .map_or("a".to_string(), |p| p.node.clone());
            self.requests
                .insert(uid.into(), Asked { node, pod, outcome });
        }

        fn census(&self) -> Census {
            Census {
                matching: self.pods.iter().cloned().map(Arc::new).collect(),
                namespace_pods: if self.budgets.is_empty() {
                    Vec::new()
                } else {
                    self.pods.iter().map(|p| p.state.clone()).collect()
                },
                budgets: self.budgets.clone(),
                live_agents: self.live.iter().map(|n| n.to_string()).collect(),
            }
        }

        fn step(&self) -> Decision {
            decide(&Facts {
                now: self.now,
                generation: Some(1),
                spec: &self.spec,
                status: &self.status,
                census: &self.census(),
                requests: &self.requests,
            })
        }
    }

    fn claimed(step: &Decision) -> Vec<&str> {
        step.claimed.iter().map(|c| c.pod.as_str()).collect()
    }

    fn claims_of<'s>(step: &'s Decision, node: &str) -> Vec<&'s str> {
        step.status
            .part(node)
            .map(|p| p.claims.iter().map(|c| c.pod.as_str()).collect())
            .unwrap_or_default()
    }

    fn condition<'s>(step: &'s Decision, type_: &str) -> Option<&'s Condition> {
        step.status.conditions.iter().find(|c| c.type_ == type_)
    }

    #[test]
    fn the_first_pass_starts_the_rollout_at_a_whole_second() {
        let mut run = Run::new(&[pod("a1", "a", true)]);
        run.status = RolloutStatus::default();
        run.now = "2026-11-29T08:00:01.734Z".parse().unwrap();
        let step = run.step();
        assert_eq!(
            step.status.start_time.as_deref(),
            Some("2026-11-29T08:00:01Z")
        );
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(claimed(&step), ["a1"]);
        assert_eq!(claims_of(&step, "a"), ["a1"], "written in a's part");
        assert_eq!(step.status.in_progress, 1);
        assert_eq!(step.status.matched, 1);
    }

    #[test]
    fn claims_count_every_nodes_claims_and_the_unready_pods() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
            pod("b1", "b", true),
            pod("c1", "c", false),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.status.nodes.push(NodePart {
            node: "b".into(),
            claims: vec![claim_of("b1", START)],
            ..Default::default()
        });
        // b1 claimed and c1 unready: room for one.
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        run.status = step.status;
        let step = run.step();
        assert!(step.claimed.is_empty());
        assert_eq!(
            step.waiting.as_deref(),
            Some("3 of 3 allowed unavailable (2 restarting, 1 unready)")
        );
        assert!(
            step.status.nodes.iter().all(|p| p.waiting.is_none()),
            "a budget in use is not written down"
        );
        run.spec = spec(json!({"maxUnavailable": 2}));
        assert!(run.step().claimed.is_empty());
    }

    #[test]
    fn claims_are_taken_in_turn_from_the_nodes_whose_agent_is_alive() {
        let all: Vec<RolloutPod> = ["a", "b", "n"]
            .iter()
            .flat_map(|node| (1..=3).map(move |i| pod(&format!("{node}{i}"), node, true)))
            .collect();
        let mut run = Run::new(&all);
        run.live = vec!["a", "b"];
        run.spec = spec(json!({"maxUnavailable": 5}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a1", "b1", "a2", "b2", "a3"]);
        assert_eq!(claims_of(&step, "a"), ["a1", "a2", "a3"]);
        assert_eq!(claims_of(&step, "b"), ["b1", "b2"]);
        assert!(step.status.part("n").is_none(), "n has no agent");
    }

    #[test]
    fn a_percentage_is_of_every_matching_pod() {
        let all: Vec<RolloutPod> = (0..20)
            .map(|i| pod(&format!("p{i:02}"), if i < 10 { "a" } else { "b" }, true))
            .collect();
        let mut run = Run::new(&all);
        run.spec = spec(json!({"maxUnavailable": "10%"}));
        assert_eq!(claimed(&run.step()), ["p00", "p10"]);
    }

    #[test]
    fn claims_end_done_failed_or_skipped_and_a_failure_stops_the_rollout() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a1", "a2", "a3"]);
        run.status = step.status;
        run.pods.retain(|p| p.state.name != "a3");
        run.ask("uid-a1", RequestOutcome::Succeeded);
        run.ask("uid-a2", RequestOutcome::Underway);
        let step = run.step();
        assert_eq!(step.status.done, 1);
        let part = step.status.part("a").unwrap();
        assert_eq!(part.skipped, 1);
        assert_eq!(part.claims.len(), 1);
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        run.status = step.status;
        run.ask(
            "uid-a2",
            RequestOutcome::Failed("container app did not start".into()),
        );
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Failed);
        assert_eq!(step.status.failed, 1);
        assert_eq!(
            step.status.message.as_deref(),
            Some("1 pods failed to restart: pod a2: container app did not start")
        );
        let failed = condition(&step, CONDITION_FAILED);
        assert_eq!(failed.map(|c| c.status.as_str()), Some("True"));
        assert_eq!(
            step.status.part("a").unwrap().failures,
            [Failure::new("a2", "uid-a2", "container app did not start")]
        );
    }

    #[test]
    fn a_failure_policy_lets_the_rollout_go_on() {
        let mut run = Run::new(&[pod("a1", "a", true), pod("a2", "a", true)]);
        run.spec = spec(json!({"maxUnavailable": 2, "failurePolicy": {"maxFailedPods": 2}}));
        run.status = run.step().status;
        run.ask("uid-a1", RequestOutcome::Failed("boom".into()));
        run.ask("uid-a2", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!(
            step.status.message.as_deref(),
            Some(
                "every pod restarted but 1 (within spec.failurePolicy): 1 pods failed to restart: pod a1: boom"
            )
        );
    }

    #[test]
    fn pods_created_after_the_start_are_not_restarted_and_said_so() {
        let mut late = pod("a2", "a", true);
        late.created = Some(at(5));
        let mut run = Run::new(&[pod("a1", "a", true), late]);
        run.spec = spec(json!({"maxUnavailable": 2}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        assert_eq!(step.status.not_included, 1);
        run.status = step.status;
        run.ask("uid-a1", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!(step.status.matched, 1);
        assert_eq!(step.status.done, 1);
    }

    #[test]
    fn paused_claims_nothing_and_finishes_what_is_under_way() {
        let mut run = Run::new(&[pod("a1", "a", true), pod("a2", "a", true)]);
        run.status = run.step().status;
        run.spec = spec(json!({"paused": true}));
        run.ask("uid-a1", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Paused);
        assert!(step.claimed.is_empty());
        assert_eq!(step.status.done, 1);
        assert!(step.status.nodes.is_empty(), "nothing left to say of a");
        run.status = step.status;
        run.spec = spec(json!({}));
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(claimed(&step), ["a2"]);
    }

    #[test]
    fn a_deadline_fails_the_rollout() {
        let mut run = Run::new(&[pod("a1", "a", true)]);
        run.spec = spec(json!({"deadlineSeconds": 30}));
        run.now = at(29);
        assert_eq!(run.step().status.phase, RolloutPhase::Progressing);
        run.now = at(30);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Failed);
        assert!(step.claimed.is_empty());
        assert_eq!(
            step.status.message.as_deref(),
            Some("not finished within spec.deadlineSeconds (30 s)")
        );
    }

    #[test]
    fn a_disruption_budget_holds_claims_back() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("b1", "b", true),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(
            json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 2}}),
        )
        .unwrap();
        run.budgets = vec![Budget::of(&pdb).unwrap()];
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"], "3 healthy, 2 required");
        run.status = step.status;
        let step = run.step();
        let said = "PodDisruptionBudget web allows no disruption (2 healthy, 2 required)";
        assert_eq!(step.waiting.as_deref(), Some(said));
        for node in ["a", "b"] {
            assert_eq!(
                step.status.part(node).unwrap().waiting.as_deref(),
                Some(said),
                "written down for {node}, which has pods left"
            );
        }
    }

    #[test]
    fn claims_of_an_agent_that_is_gone_are_released_once_their_pods_are_ready_or_gone() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("b1", "b", true),
            pod("b2", "b", false),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.status.nodes.push(NodePart {
            node: "b".into(),
            claims: vec![
                claim_of("b1", START),
                claim_of("b2", START),
                claim_of("b3", START),
            ],
            ..Default::default()
        });
        // b's agent alive: b3 is gone (skipped); b1 and b2 wait for their requests. Room for
        // one more (b2 is unready but claimed).
        let step = run.step();
        assert_eq!(claims_of(&step, "b"), ["b1", "b2"]);
        assert_eq!(claimed(&step), ["a1"]);
        assert_eq!(step.status.part("b").unwrap().skipped, 1);
        run.status = step.status;
        // b's agent gone; b1's request under way: kept, even long after.
        run.live = vec!["a"];
        run.ask("uid-b1", RequestOutcome::Underway);
        run.now = at(10 * LEASE_DURATION.as_secs() as i64);
        assert_eq!(claims_of(&run.step(), "b"), ["b1", "b2"]);
        // No request for b1: b's agent may still make it for twice a Lease's duration.
        run.requests.clear();
        run.now = at(2 * LEASE_DURATION.as_secs() as i64 - 1);
        assert_eq!(claims_of(&run.step(), "b"), ["b1", "b2"]);
        // Then b1 (ready) is released; b2, unready, keeps its claim.
        run.now = at(2 * LEASE_DURATION.as_secs() as i64);
        let step = run.step();
        assert_eq!(claims_of(&step, "b"), ["b2"]);
        assert_eq!(step.status.in_progress, 2, "a1's and b2's");
        // b2's request failed: released whatever its pod does.
        run.status = step.status;
        run.ask("uid-b2", RequestOutcome::Failed("x".into()));
        run.spec = spec(json!({"maxUnavailable": 3, "failurePolicy": {"maxFailedPods": 2}}));
        let step = run.step();
        assert!(claims_of(&step, "b").is_empty());
        assert_eq!(step.status.part("b").unwrap().failures.len(), 1);
    }

    #[test]
    fn pods_on_nodes_without_an_agent_are_reported_after_the_grace() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("n1", "n", true),
            pod("n2", "n", true),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.live = vec!["a"];
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        run.status = step.status;
        run.ask("uid-a1", RequestOutcome::Succeeded);
        run.now = at(LEASE_DURATION.as_secs() as i64 - 1);
        assert!(condition(&run.step(), CONDITION_WAITING).is_none());
        run.now = at(LEASE_DURATION.as_secs() as i64);
        let step = run.step();
        let waiting = condition(&step, CONDITION_WAITING).unwrap();
        assert_eq!(waiting.status, "True");
        assert_eq!(waiting.message, "waiting for node n: no agent (2 pods)");
        assert_eq!(
            step.status.message.as_deref(),
            Some(waiting.message.as_str())
        );
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(step.status.done, 1);
        // An agent comes up on n: its pods are claimed.
        run.status = step.status;
        run.live = vec!["a", "n"];
        let step = run.step();
        assert_eq!(claimed(&step), ["n1", "n2"]);
        assert_eq!(condition(&step, CONDITION_WAITING).unwrap().status, "False");
        assert_eq!(step.status.message, None);
    }

    #[test]
    fn the_last_pod_to_finish_ends_the_rollout() {
        let mut run = Run::new(&[pod("a1", "a", true), pod("b1", "b", true)]);
        run.spec = spec(json!({"maxUnavailable": 2}));
        run.ask("uid-b1", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        run.status = step.status;
        run.ask("uid-a1", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!((step.status.matched, step.status.done), (2, 2));
        let complete = condition(&step, CONDITION_COMPLETE).unwrap();
        assert_eq!(complete.status, "True");
        assert_eq!(
            step.status.completion_time.as_deref(),
            Some("2026-11-29T08:00:01Z")
        );
        // Final: nothing changes any more.
        run.status = step.status.clone();
        assert_eq!(run.step().status, step.status);
    }

    #[test]
    fn a_claim_left_without_its_request_is_let_go_and_made_afresh() {
        let mut run = Run::new(&[pod("a1", "a", true)]);
        run.status = run.step().status;
        // No request made for a1, claimed at 1 s. Its agent makes it only while the claim is
        // fresh; the leader waits twice as long.
        assert!(fresh(&claim_of("a1", &seconds(at(1))), at(40)));
        assert!(!fresh(&claim_of("a1", &seconds(at(1))), at(41)));
        run.now = at(2 * LEASE_DURATION.as_secs() as i64);
        assert!(run.step().claimed.is_empty());
        run.now = at(2 * LEASE_DURATION.as_secs() as i64 + 1);
        let step = run.step();
        assert_eq!(
            claimed(&step),
            ["a1"],
            "released, then claimed again at once: {step:#?}"
        );
        assert_eq!(step.claimed[0].since, seconds(run.now));
    }

    #[test]
    fn a_pods_request_is_its_record_whoever_released_its_claim() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
        ]);
        // a1 was restarted under an earlier leader; a9 was restarted and is gone since.
        run.ask("uid-a1", RequestOutcome::Succeeded);
        run.ask("uid-a9", RequestOutcome::Failed("boom".into()));
        run.spec = spec(json!({"failurePolicy": {"maxFailedPods": 2}}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a2"], "a1 is not asked twice");
        assert_eq!(step.status.matched, 4);
        assert_eq!(
            step.status.part("a").unwrap().failures,
            [Failure::new("a9", "uid-a9", "boom")]
        );
        assert_eq!((step.status.done, step.status.failed), (1, 1));
    }

    #[test]
    fn a_gone_agents_pods_left_keep_the_rollout_waiting_until_they_are_gone() {
        let mut run = Run::new(&[
            pod("a1", "a", true),
            pod("b1", "b", true),
            pod("b2", "b", true),
        ]);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.now = at(LEASE_DURATION.as_secs() as i64);
        run.live = vec!["a"];
        run.ask("uid-a1", RequestOutcome::Succeeded);
        // b's agent restarted b1 and went away with b2 left.
        run.ask("uid-b1", RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(
            step.status.message.as_deref(),
            Some("waiting for node b: no agent (1 pods)")
        );
        // b2 is being deleted, then gone: counted out either way.
        for b2 in run.pods.iter_mut().filter(|p| p.state.name == "b2") {
            b2.terminating = true;
        }
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!((step.status.matched, step.status.done), (2, 2));
        run.pods.retain(|p| p.state.name != "b2");
        let step = run.step();
        assert_eq!((step.status.matched, step.status.done), (2, 2));
    }

    #[test]
    fn pods_left_are_neither_terminating_claimed_nor_asked_for_and_in_name_order() {
        let mut gone = pod("p4", "b", true);
        gone.terminating = true;
        let mut run = Run::new(&[
            pod("p3", "b", false),
            pod("p1", "b", true),
            pod("p2", "b", true),
            pod("p5", "b", true),
            gone,
        ]);
        run.status.nodes.push(NodePart {
            node: "b".into(),
            claims: vec![claim_of("p1", START)],
            ..Default::default()
        });
        run.ask("uid-p2", RequestOutcome::Underway);
        let census = run.census();
        let facts = Facts {
            now: run.now,
            generation: None,
            spec: &run.spec,
            status: &run.status,
            census: &census,
            requests: &run.requests,
        };
        let left = pods_left_to_claim(&facts, &run.status, run.status.start());
        let names: Vec<&str> = left["b"].iter().map(|p| p.state.name.as_str()).collect();
        assert_eq!(names, ["p3", "p5"]);
    }

    #[test]
    fn nodes_pods_in_turn_spread_over_the_nodes() {
        let a: Vec<RolloutPod> = (1..=3).map(|i| pod(&format!("a{i}"), "a", true)).collect();
        let b = [pod("b1", "b", true)];
        let lists: BTreeMap<String, Vec<&RolloutPod>> = [
            ("a".to_string(), a.iter().collect()),
            ("b".to_string(), b.iter().collect()),
        ]
        .into();
        let names: Vec<&str> = in_turn(lists.iter())
            .iter()
            .map(|p| p.state.name.as_str())
            .collect();
        assert_eq!(names, ["a1", "b1", "a2", "a3"]);
    }

    #[test]
    fn failures_are_in_pod_order_in_their_nodes_parts() {
        let mut run = Run::new(&[]);
        for (uid, outcome) in [
            ("uid-b", RequestOutcome::Failed("no".into())),
            ("uid-a", RequestOutcome::Failed("no".into())),
            ("uid-c", RequestOutcome::Succeeded),
            ("uid-d", RequestOutcome::Underway),
        ] {
            run.ask(uid, outcome);
        }
        let mut status = started();
        record_outcomes(&mut status, &run.requests);
        assert_eq!(status.done, 1);
        let failed: Vec<&str> = status.nodes[0]
            .failures
            .iter()
            .map(|f| f.pod.as_str())
            .collect();
        assert_eq!(failed, ["a", "b"]);
    }

    /// Agents that each believe they lead, deciding from copies that may lag (their watches)
    /// through a server that orders writes by resourceVersion; node agents making the
    /// requests of their claims from their own copies; agents dying and coming back; restarts
    /// making pods unready; time passing. Never more unready pods than the budget, never a
    /// claim of a pod already asked, and once every agent is back the rollout ends with every
    /// pod restarted once.
    mod racing {
        use super::*;
        use proptest::prelude::*;

        struct Sim {
            max: usize,
            spec: RolloutSpec,
            nodes: Vec<String>,
            pods: Vec<RolloutPod>,
            server: (u64, RolloutStatus),
            copies: Vec<(u64, RolloutStatus)>,
            alive: Vec<bool>,
            /// Pod UID → (node, its request succeeded): a request is made once (its name is
            /// fixed), so this is every restart.
            requests: HashMap<String, (String, bool)>,
            clock: i64,
            worst: usize,
        }

        impl Sim {
            fn new(nodes: usize, per_node: usize, max: usize) -> Sim {
                let names: Vec<String> = (0..nodes).map(|n| format!("n{n}")).collect();
                let pods = names
                    .iter()
                    .flat_map(|n| (0..per_node).map(move |i| pod(&format!("{n}-p{i}"), n, true)))
                    .collect();
                Sim {
                    max,
                    spec: spec(json!({"maxUnavailable": max})),
                    copies: vec![(0, RolloutStatus::default()); nodes],
                    alive: vec![true; nodes],
                    nodes: names,
                    pods,
                    server: (0, RolloutStatus::default()),
                    requests: HashMap::new(),
                    clock: 0,
                    worst: 0,
                }
            }

            fn check(&mut self) {
                let unready = self.pods.iter().filter(|p| !p.state.ready).count();
                self.worst = self.worst.max(unready);
                assert!(
                    unready <= self.max,
                    "{unready} unready, budget {}",
                    self.max
                );
            }

            fn deliver(&mut self, agent: usize) {
                self.copies[agent] = self.server.clone();
            }

            /// One pass of an agent: its node's requests from its copy, then a leader's pass.
            fn act(&mut self, agent: usize) {
                if !self.alive[agent] {
                    return;
                }
                self.clock += 1;
                let now = at(self.clock);
                let node = self.nodes[agent].clone();
                let (rv, status) = self.copies[agent].clone();
                for claim in status.part(&node).map_or(&[][..], |p| &p.claims) {
                    if fresh(claim, now) && !self.requests.contains_key(&claim.pod_uid) {
                        self.requests
                            .insert(claim.pod_uid.clone(), (node.clone(), false));
                        // The stop lands at once: the worst case.
                        if let Some(p) = self.pods.iter_mut().find(|p| p.state.uid == claim.pod_uid)
                        {
                            p.state.ready = false;
                        }
                        self.check();
                    }
                }
                let census = Census {
                    matching: self.pods.iter().cloned().map(Arc::new).collect(),
                    live_agents: self
                        .nodes
                        .iter()
                        .zip(&self.alive)
                        .filter(|(_, alive)| **alive)
                        .map(|(n, _)| n.clone())
                        .collect(),
                    ..Default::default()
                };
                let requests: Requests = self
                    .requests
                    .iter()
                    .map(|(uid, (node, done))| {
                        let outcome = if *done {
                            RequestOutcome::Succeeded
                        } else {
                            RequestOutcome::Underway
                        };
                        let pod = uid.trim_start_matches("uid-").to_string();
                        (
                            uid.clone(),
                            Asked {
                                node: node.clone(),
                                pod,
                                outcome,
                            },
                        )
                    })
                    .collect();
                let step = decide(&Facts {
                    now,
                    generation: Some(1),
                    spec: &self.spec,
                    status: &status,
                    census: &census,
                    requests: &requests,
                });
                for claim in &step.claimed {
                    assert!(
                        !self.requests.contains_key(&claim.pod_uid),
                        "{} claimed after its request",
                        claim.pod
                    );
                }
                if step.status != status && rv == self.server.0 {
                    self.server = (rv + 1, step.status);
                }
            }

            /// A restart finishes (its agent is there to see it): the pod is ready again and
            /// its request succeeded.
            fn progress(&mut self, which: usize) {
                let mut underway: Vec<String> = self
                    .requests
                    .iter()
                    .filter(|(_, (node, done))| {
                        !*done
                            && self
                                .nodes
                                .iter()
                                .zip(&self.alive)
                                .any(|(n, a)| n == node && *a)
                    })
                    .map(|(uid, _)| uid.clone())
                    .collect();
                if underway.is_empty() {
                    return;
                }
                underway.sort();
                let uid = underway[which % underway.len()].clone();
                if let Some(request) = self.requests.get_mut(&uid) {
                    request.1 = true;
                }
                if let Some(p) = self.pods.iter_mut().find(|p| p.state.uid == uid) {
                    p.state.ready = true;
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]
            #[test]
            fn racing_leaders_and_dying_agents_never_exceed_the_budget(
                nodes in 2usize..6,
                per_node in 1usize..5,
                max in 1usize..4,
                moves in proptest::collection::vec((0u8..6, 0usize..64), 0..400),
            ) {
                let mut sim = Sim::new(nodes, per_node, max);
                for (kind, which) in moves {
                    match kind {
                        0 => sim.deliver(which % nodes),
                        1 | 2 => sim.act(which % nodes),
                        3 => sim.progress(which),
                        // An agent dies, or comes back knowing nothing.
                        4 => {
                            let agent = which % nodes;
                            sim.alive[agent] = !sim.alive[agent];
                            sim.copies[agent] = (0, RolloutStatus::default());
                        }
                        // Time passes: claims age.
                        _ => sim.clock += (which % 50) as i64,
                    }
                }
                // Every agent back, then everyone in turn until the end.
                sim.alive.iter_mut().for_each(|a| *a = true);
                for _ in 0..(nodes * per_node * 4 + 200) {
                    if sim.server.1.phase == RolloutPhase::Succeeded {
                        break;
                    }
                    for agent in 0..nodes {
                        sim.deliver(agent);
                        sim.act(agent);
                    }
                    sim.progress(0);
                    sim.clock += 1;
                }
                prop_assert_eq!(sim.server.1.phase, RolloutPhase::Succeeded);
                prop_assert_eq!(sim.server.1.done as usize, nodes * per_node);
                prop_assert_eq!(sim.requests.len(), nodes * per_node);
                prop_assert!(sim.worst <= max);
            }
        }
    }
}
