//! One agent's pass over one rollout, decided from facts alone (no I/O): what its node's part
//! becomes (claims followed to their end, new claims within the budget), which claims of agents
//! that are gone it releases, and the summary. The controller writes the result with the
//! resourceVersion it was decided from, so that every claim of every node is decided from the
//! claims before it: the API server orders them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

/// How a request of the rollout stands (a pod without one has none in the maps below).
#[derive(Clone, Debug, PartialEq)]
pub enum RequestOutcome {
    Underway,
    Succeeded,
    Failed(String),
}

/// One of this node's requests of the rollout: the record that its pod was restarted (or is
/// being), which outlives the pod and the agent.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRequest {
    pub pod: String,
    pub outcome: RequestOutcome,
}

/// The requests of one node's pods, by pod UID.
pub(crate) type NodeRequests = HashMap<String, RequestOutcome>;

/// The rollout's namespace over every node, as this agent's watches show it (none before they
/// have listed: nothing is claimed then).
#[derive(Clone, Debug, Default)]
pub struct Census {
    /// The pods matching the selector, on every node (shared with the watch's copy: a census
    /// is taken on every pass).
    pub matching: Vec<Arc<RolloutPod>>,
    pub budgets: Vec<Budget>,
    /// Every pod of the namespace (for the budgets; empty without budgets).
    pub namespace_pods: Vec<PodState>,
    /// Nodes whose agent holds an unexpired Lease.
    pub live_agents: HashSet<String>,
    /// The rollout's requests on nodes whose agent is gone (those with a part), by node, then
    /// by pod UID: every one of them, for the nodes listed (a node whose listing failed is
    /// missing).
    pub foreign_requests: HashMap<String, NodeRequests>,
}

pub struct Facts<'a> {
    pub node: &'a str,
    pub now: Timestamp,
    pub generation: Option<i64>,
    pub spec: &'a RolloutSpec,
    pub status: &'a RolloutStatus,
    /// This node's pods matching the selector (the node view).
    pub my_pods: &'a [RolloutPod],
    /// Every request of the rollout for this node's pods, by pod UID, as this node's request
    /// watch shows them once it has listed (with those made and not yet brought by it): a pod
    /// without one has not been asked to restart.
    pub requests: &'a HashMap<String, NodeRequest>,
    pub census: Option<&'a Census>,
}

/// What one pass decided for this node.
#[derive(Debug, PartialEq)]
pub struct Decision {
    /// The status to write (the same as read: nothing to write).
    pub status: RolloutStatus,
    /// Claims made in this pass: their requests are made once the write has landed.
    pub claimed: Vec<Claim>,
    /// Why this node claims nothing now, when it has pods left to restart.
    pub waiting: Option<String>,
    /// This node takes part in the unfinished rollout (pods to restart, under way, or a part
    /// written): its agent keeps its Lease, so that the others can tell a part whose agent
    /// is gone (its requests are then listed) from one that is finished.
    pub takes_part: bool,
}

fn age(claim: &Claim, now: Timestamp) -> Duration {
    let since = claim
        .since
        .parse::<Timestamp>()
        .map_or(0, |t| t.as_second());
    Duration::from_secs(now.as_second().saturating_sub(since).max(0) as u64)
}

/// A claim young enough for its agent to make its request: other agents release a claim
/// without a request only after twice as long.
pub fn fresh(claim: &Claim, now: Timestamp) -> bool {
    age(claim, now) < LEASE_DURATION
}

fn included(pod: &RolloutPod, start: Option<Timestamp>) -> bool {
    match (pod.created, start) {
        (Some(created), Some(start)) => created <= start,
        _ => true,
    }
}

/// One pass for `facts.node` over the rollout.
pub fn decide(facts: &Facts) -> Decision {
    let mut status = facts.status.clone();
    let now = facts.now;
    if status.start_time.is_none() {
        status.start_time = Some(seconds(now));
    }
    let start = status.start();
    let part = follow_own_part(facts, &status, start);
    put_part(&mut status, part);
    if let Some(census) = facts.census {
        release_gone_agents_claims(&mut status, census, facts.node, now);
    }
    if !status.phase.is_final() {
        advance_phase(&mut status, facts.spec, start, now);
    }
    let todo = pods_left_to_claim(facts, &status, start);
    let (claimed, waiting) = claim_or_wait(facts, &mut status, &todo);
    if !status.phase.is_final()
        && let Some(census) = facts.census
    {
        conclude(&mut status, census, facts.node, start, now);
    }
    summarize(&mut status, facts.node, facts.generation);
    let takes_part =
        !status.phase.is_final() && (!todo.is_empty() || status.part(facts.node).is_some());
    Decision {
        status,
        claimed,
        waiting: if todo.is_empty() { None } else { waiting },
        takes_part,
    }
}

/// This node's part as its pods and requests show it now: what it counts, and its claims
/// followed to their end (a finished request is the pod's record).
fn follow_own_part(facts: &Facts, status: &RolloutStatus, start: Option<Timestamp>) -> NodePart {
    let mut part = status
        .part(facts.node)
        .cloned()
        .unwrap_or_else(|| NodePart {
            node: facts.node.to_string(),
            ..Default::default()
        });
    let here: HashSet<&str> = facts.my_pods.iter().map(|p| p.state.uid.as_str()).collect();
    let included_here = facts.my_pods.iter().filter(|p| included(p, start)).count();
    // The pods restarted (or being) and gone since are the rollout's too.
    let gone_since = facts
        .requests
        .keys()
        .filter(|uid| !here.contains(uid.as_str()))
        .count();
    part.matched = (included_here + gone_since) as u32;
    part.not_included = (facts.my_pods.len() - included_here) as u32;

    let mut kept = Vec::new();
    for claim in std::mem::take(&mut part.claims) {
        let outcome = facts.requests.get(&claim.pod_uid).map(|r| &r.outcome);
        match outcome {
            Some(RequestOutcome::Succeeded | RequestOutcome::Failed(_)) => {}
            _ if !here.contains(claim.pod_uid.as_str()) => part.skipped += 1,
            // A claim whose request was not made in time (the agent stopped in between) is
            // let go: other agents may have released it already. The pod is claimed afresh.
            None if !fresh(&claim, facts.now) => {}
            _ => kept.push(claim),
        }
    }
    part.claims = kept;
    record_outcomes(&mut part, facts.requests);
    part
}

/// The part's done count and failures, from every request of the node's pods.
fn record_outcomes(part: &mut NodePart, requests: &HashMap<String, NodeRequest>) {
    part.done = requests
        .values()
        .filter(|r| r.outcome == RequestOutcome::Succeeded)
        .count() as u32;
    part.failures = requests
        .iter()
        .filter_map(|(uid, r)| match &r.outcome {
            RequestOutcome::Failed(message) => Some(Failure::new(&r.pod, uid, message)),
            _ => None,
        })
        .collect();
    part.failures
        .sort_by(|a, b| (&a.pod, &a.pod_uid).cmp(&(&b.pod, &b.pod_uid)));
}

/// Claims of agents that are gone: released once their pods are gone, or ready with their
/// request finished, or ready with no request made long after the claim (its agent makes
/// a request only for a claim younger than the Lease's duration: it cannot make one now).
fn release_gone_agents_claims(
    status: &mut RolloutStatus,
    census: &Census,
    node: &str,
    now: Timestamp,
) {
    for other in status.nodes.iter_mut() {
        if other.node == node || census.live_agents.contains(&other.node) {
            continue;
        }
        other.claims.retain(|claim| {
            let Some(pod) = census
                .matching
                .iter()
                .find(|p| p.state.uid == claim.pod_uid)
            else {
                return false;
            };
            // A node whose requests could not be listed: nothing is known of them.
            let released = pod.state.ready
                && census
                    .foreign_requests
                    .get(&other.node)
                    .is_some_and(|asked| match asked.get(&claim.pod_uid) {
                        Some(RequestOutcome::Succeeded | RequestOutcome::Failed(_)) => true,
                        Some(RequestOutcome::Underway) => false,
                        None => age(claim, now) >= 2 * LEASE_DURATION,
                    });
            !released
        });
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

/// This node's pods left to restart: those without a request and unclaimed, in name order.
fn pods_left_to_claim<'a>(
    facts: &Facts<'a>,
    status: &RolloutStatus,
    start: Option<Timestamp>,
) -> Vec<&'a RolloutPod> {
    let claimed_here: HashSet<&str> = status
        .part(facts.node)
        .into_iter()
        .flat_map(|p| p.claims.iter().map(|c| c.pod_uid.as_str()))
        .collect();
    let mut todo: Vec<&RolloutPod> = facts
        .my_pods
        .iter()
        .filter(|p| {
            let uid = p.state.uid.as_str();
            included(p, start)
                && !p.terminating
                && !claimed_here.contains(uid)
                && !facts.requests.contains_key(uid)
        })
        .collect();
    todo.sort_by(|a, b| a.state.name.cmp(&b.state.name));
    todo
}

/// Claims of `todo` while the rollout progresses, written in this node's part with what is
/// left pending; with them, why this node claims nothing (more) now.
fn claim_or_wait(
    facts: &Facts,
    status: &mut RolloutStatus,
    todo: &[&RolloutPod],
) -> (Vec<Claim>, Option<String>) {
    let mut claimed = Vec::new();
    let mut waiting = None;
    if status.phase == RolloutPhase::Progressing && !todo.is_empty() {
        let mut part = status.part(facts.node).cloned().unwrap_or_default();
        match facts.census {
            Some(census) => match claim(facts, census, status, todo, facts.now) {
                Ok(new) => {
                    claimed = new;
                    part.waiting = None;
                }
                Err(Waiting::BudgetInUse(reason)) => {
                    part.waiting = None;
                    waiting = Some(reason);
                }
                Err(Waiting::Blocked(reason)) => {
                    part.waiting = Some(reason.clone());
                    waiting = Some(reason);
                }
            },
            None => waiting = Some("not counted yet".into()),
        }
        part.claims.extend(claimed.iter().cloned());
        part.pending = (todo.len() - claimed.len()) as u32;
        put_part(status, part);
    } else if let Some(mut part) = status.part(facts.node).cloned() {
        part.waiting = None;
        part.pending = todo.len() as u32;
        put_part(status, part);
    }
    (claimed, waiting)
}

/// Why a node claims nothing now.
enum Waiting {
    /// The rollout's budget is in use: the usual state of a rollout, not written down.
    BudgetInUse(String),
    /// Something the user may need to act on (a PodDisruptionBudget, unready pods): written in
    /// the node's part.
    Blocked(String),
}

/// This node's new claims: as many of `todo` (ready pods, in name order) as the budget leaves
/// room for, counting every node's claims and the matching pods that are unready unclaimed,
/// and as every covering PodDisruptionBudget allows.
fn claim(
    facts: &Facts,
    census: &Census,
    status: &RolloutStatus,
    todo: &[&RolloutPod],
    now: Timestamp,
) -> Result<Vec<Claim>, Waiting> {
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
    for pod in todo {
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
        out.push(Claim {
            pod: pod.state.name.clone(),
            pod_uid: pod.state.uid.clone(),
            since: seconds(now),
        });
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
            "the pods left here are not ready: waiting for them".into(),
        )),
    }
}

/// With the whole namespace counted: the rollout's size, its end, and the nodes it waits on.
/// A node's part says how many of its pods are left (`pending`) as its agent last saw them;
/// for a node whose agent is gone, its requests listed say it better (its pods may have gone
/// since), and a node without a part has all its pods left.
fn conclude(
    status: &mut RolloutStatus,
    census: &Census,
    node: &str,
    start: Option<Timestamp>,
    now: Timestamp,
) {
    let ours: Vec<&RolloutPod> = census
        .matching
        .iter()
        .map(Arc::as_ref)
        .filter(|p| included(p, start))
        .collect();
    status.not_included = (census.matching.len() - ours.len()) as u32;
    let any_claims = status.claims().next().is_some();
    let (matched, pending_by_node) = count_left(status, census, node, &ours);
    status.matched = matched as u32;
    report_nodes_without_agent(status, census, node, start, &pending_by_node, now);
    if pending_by_node.is_empty() && !any_claims && status.phase == RolloutPhase::Progressing {
        let failed: usize = status.nodes.iter().map(|p| p.failures.len()).sum();
        let message = if failed == 0 {
            "every pod restarted".to_string()
        } else {
            format!(
                "every pod restarted but {failed} (within spec.failurePolicy): {}",
                first_failures(status)
            )
        };
        finish(status, RolloutPhase::Succeeded, "Restarted", message, now);
    }
}

/// The rollout's size (the pods it counts, on every node) and each node's pods left to
/// restart, from `ours`: the matching pods it includes.
fn count_left(
    status: &RolloutStatus,
    census: &Census,
    node: &str,
    ours: &[&RolloutPod],
) -> (usize, BTreeMap<String, usize>) {
    let claimed: HashSet<&str> = status.claims().map(|(_, c)| c.pod_uid.as_str()).collect();
    let parts: HashMap<&str, &NodePart> =
        status.nodes.iter().map(|p| (p.node.as_str(), p)).collect();
    let mut ours_by_node: BTreeMap<&str, Vec<&RolloutPod>> = BTreeMap::new();
    for pod in ours {
        ours_by_node.entry(pod.node.as_str()).or_default().push(pod);
    }
    let mut matched = 0usize;
    let mut pending_by_node: BTreeMap<String, usize> = BTreeMap::new();
    let nodes: BTreeSet<&str> = ours_by_node.keys().chain(parts.keys()).copied().collect();
    for name in nodes {
        let pods = ours_by_node.get(name).map_or(&[][..], Vec::as_slice);
        let pending = match parts.get(name) {
            None => {
                matched += pods.len();
                left_unasked(pods, &claimed, None)
            }
            Some(part) => {
                matched += part.matched as usize;
                let gone = name != node && !census.live_agents.contains(name);
                match census.foreign_requests.get(name) {
                    Some(asked) if gone => left_unasked(pods, &claimed, Some(asked)),
                    _ => part.pending as usize,
                }
            }
        };
        if pending > 0 {
            pending_by_node.insert(name.to_string(), pending);
        }
    }
    (matched, pending_by_node)
}

/// How many of `pods` are left to restart: neither terminating, claimed nor asked for.
fn left_unasked(
    pods: &[&RolloutPod],
    claimed: &HashSet<&str>,
    asked: Option<&NodeRequests>,
) -> usize {
    pods.iter()
        .filter(|p| {
            let uid = p.state.uid.as_str();
            !p.terminating && !claimed.contains(uid) && asked.is_none_or(|a| !a.contains_key(uid))
        })
        .count()
}

/// The `WaitingForNodes` condition (and message): the nodes with pods left whose agent is
/// gone or never came.
fn report_nodes_without_agent(
    status: &mut RolloutStatus,
    census: &Census,
    node: &str,
    start: Option<Timestamp>,
    pending_by_node: &BTreeMap<String, usize>,
    now: Timestamp,
) {
    // An agent has the Lease's duration from the start to take its part up.
    let grace_over =
        start.is_some_and(|s| now.as_second() >= s.as_second() + LEASE_DURATION.as_secs() as i64);
    let without_agent: Vec<(&str, usize)> = pending_by_node
        .iter()
        .filter(|(name, _)| grace_over && *name != node && !census.live_agents.contains(*name))
        .map(|(name, count)| (name.as_str(), *count))
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

/// The counts, from the parts; this node's part dropped when empty (another node's part is
/// only ever changed by releasing its claims: the admission policy), parts in node order.
fn summarize(status: &mut RolloutStatus, node: &str, generation: Option<i64>) {
    status.observed_generation = generation;
    status.nodes.retain(|p| {
        p.node != node
            || p.matched > 0
            || !p.claims.is_empty()
            || p.done > 0
            || !p.failures.is_empty()
            || p.skipped > 0
            || p.pending > 0
            || p.not_included > 0
    });
    status.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    status.done = status.nodes.iter().map(|p| p.done).sum();
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

fn put_part(status: &mut RolloutStatus, part: NodePart) {
    match status.nodes.iter_mut().find(|p| p.node == part.node) {
        Some(existing) => *existing = part,
        None => status.nodes.push(part),
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

    fn census(pods: &[RolloutPod], live: &[&str]) -> Census {
        Census {
            matching: pods.iter().cloned().map(Arc::new).collect(),
            live_agents: live.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        }
    }

    struct Run<'a> {
        node: &'a str,
        now: Timestamp,
        spec: RolloutSpec,
        status: RolloutStatus,
        pods: Vec<RolloutPod>,
        requests: HashMap<String, NodeRequest>,
        census: Option<Census>,
    }

    impl<'a> Run<'a> {
        fn new(node: &'a str, all: &[RolloutPod]) -> Run<'a> {
            Run {
                node,
                now: at(1),
                spec: spec(json!({})),
                status: started(),
                pods: all.iter().filter(|p| p.node == node).cloned().collect(),
                requests: HashMap::new(),
                census: Some(census(all, &["a", "b", "c"])),
            }
        }

        /// This node's request for the pod `uid` (`uid-<pod>`) stands so.
        fn ask(&mut self, uid: String, outcome: RequestOutcome) {
            let pod = uid.trim_start_matches("uid-").to_string();
            self.requests.insert(uid, NodeRequest { pod, outcome });
        }

        fn step(&self) -> Decision {
            decide(&Facts {
                node: self.node,
                now: self.now,
                generation: Some(1),
                spec: &self.spec,
                status: &self.status,
                my_pods: &self.pods,
                requests: &self.requests,
                census: self.census.as_ref(),
            })
        }
    }

    fn claimed(step: &Decision) -> Vec<&str> {
        step.claimed.iter().map(|c| c.pod.as_str()).collect()
    }

    #[test]
    fn the_first_pass_starts_the_rollout_at_a_whole_second() {
        let all = [pod("a1", "a", true)];
        let mut run = Run::new("a", &all);
        run.status = RolloutStatus::default();
        run.now = "2026-11-29T08:00:01.734Z".parse().unwrap();
        let step = run.step();
        assert_eq!(
            step.status.start_time.as_deref(),
            Some("2026-11-29T08:00:01Z")
        );
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(claimed(&step), ["a1"]);
        assert_eq!(step.status.in_progress, 1);
        assert!(step.takes_part);
    }

    #[test]
    fn claims_count_every_nodes_claims_and_the_unready_pods() {
        let all = [
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
            pod("b1", "b", true),
            pod("c1", "c", false),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.status.nodes.push(NodePart {
            node: "b".into(),
            matched: 1,
            claims: vec![Claim {
                pod: "b1".into(),
                pod_uid: "uid-b1".into(),
                since: START.into(),
            }],
            ..Default::default()
        });
        // b1 claimed and c1 unready: one left.
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        run.status = step.status;
        let step = run.step();
        assert!(step.claimed.is_empty());
        assert_eq!(
            step.waiting.as_deref(),
            Some("3 of 3 allowed unavailable (2 restarting, 1 unready)")
        );
        run.spec = spec(json!({"maxUnavailable": 2}));
        let step = run.step();
        assert!(step.claimed.is_empty());
    }

    #[test]
    fn a_percentage_is_of_every_matching_pod() {
        let all: Vec<RolloutPod> = (0..20)
            .map(|i| pod(&format!("p{i:02}"), if i < 10 { "a" } else { "b" }, true))
            .collect();
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": "10%"}));
        assert_eq!(claimed(&run.step()), ["p00", "p01"]);
    }

    #[test]
    fn claims_end_done_failed_or_skipped_and_a_failure_stops_the_rollout() {
        let all = [
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a1", "a2", "a3"]);
        run.status = step.status;
        run.pods.retain(|p| p.state.name != "a3");
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        run.ask("uid-a2".into(), RequestOutcome::Underway);
        let step = run.step();
        let part = step.status.part("a").unwrap();
        assert_eq!(part.done, 1);
        assert_eq!(part.skipped, 1);
        assert_eq!(part.claims.len(), 1);
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        run.status = step.status;
        run.ask(
            "uid-a2".into(),
            RequestOutcome::Failed("container app did not start".into()),
        );
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Failed);
        assert_eq!(step.status.failed, 1);
        assert_eq!(
            step.status.message.as_deref(),
            Some("1 pods failed to restart: pod a2: container app did not start")
        );
        let failed = step
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_FAILED);
        assert_eq!(failed.map(|c| c.status.as_str()), Some("True"));
        assert!(!step.takes_part);
    }

    #[test]
    fn a_failure_policy_lets_the_rollout_go_on() {
        let all = [pod("a1", "a", true), pod("a2", "a", true)];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 2, "failurePolicy": {"maxFailedPods": 2}}));
        run.status = run.step().status;
        run.ask("uid-a1".into(), RequestOutcome::Failed("boom".into()));
        run.ask("uid-a2".into(), RequestOutcome::Succeeded);
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
        let all = [pod("a1", "a", true), late];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 2}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"]);
        assert_eq!(step.status.not_included, 1);
        assert_eq!(step.status.part("a").unwrap().not_included, 1);
        run.status = step.status;
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!(step.status.matched, 1);
        assert_eq!(step.status.done, 1);
    }

    #[test]
    fn paused_claims_nothing_and_finishes_what_is_under_way() {
        let all = [pod("a1", "a", true), pod("a2", "a", true)];
        let mut run = Run::new("a", &all);
        run.status = run.step().status;
        run.spec = spec(json!({"paused": true}));
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Paused);
        assert!(step.claimed.is_empty());
        assert_eq!(step.status.done, 1);
        run.status = step.status;
        run.spec = spec(json!({}));
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(claimed(&step), ["a2"]);
    }

    #[test]
    fn a_deadline_fails_the_rollout() {
        let all = [pod("a1", "a", true)];
        let mut run = Run::new("a", &all);
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
        let all = [
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("b1", "b", true),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(
            json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 2}}),
        )
        .unwrap();
        let census = run.census.as_mut().unwrap();
        census.budgets = vec![Budget::of(&pdb).unwrap()];
        census.namespace_pods = all.iter().map(|p| p.state.clone()).collect();
        let step = run.step();
        assert_eq!(claimed(&step), ["a1"], "3 healthy, 2 required");
        run.status = step.status;
        let step = run.step();
        let said = "PodDisruptionBudget web allows no disruption (2 healthy, 2 required)";
        assert_eq!(step.waiting.as_deref(), Some(said));
        assert_eq!(
            step.status.part("a").unwrap().waiting.as_deref(),
            Some(said),
            "written down"
        );
    }

    #[test]
    fn claims_of_an_agent_that_is_gone_are_released_once_their_pods_are_ready_or_gone() {
        let mut all = [
            pod("a1", "a", true),
            pod("b1", "b", true),
            pod("b2", "b", false),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        let claim = |name: &str| Claim {
            pod: name.into(),
            pod_uid: format!("uid-{name}"),
            since: START.into(),
        };
        run.status.nodes.push(NodePart {
            node: "b".into(),
            matched: 3,
            claims: vec![claim("b1"), claim("b2"), claim("b3")],
            ..Default::default()
        });
        // b's agent alive: its claims stay, whatever its pods do.
        let step = run.step();
        assert_eq!(step.status.part("b").unwrap().claims.len(), 3);
        // b's agent gone: b1 is ready again (its request done) and b3 gone; b2 restarting.
        run.census = Some(census(&all, &["a"]));
        let foreign = |run: &mut Run, uid: &str, outcome: RequestOutcome| {
            run.census
                .as_mut()
                .unwrap()
                .foreign_requests
                .entry("b".into())
                .or_default()
                .insert(uid.into(), outcome);
        };
        foreign(&mut run, "uid-b1", RequestOutcome::Underway);
        let step = run.step();
        assert_eq!(
            step.status.part("b").unwrap().claims.len(),
            2,
            "b1's request under way"
        );
        // b's requests listed, none for b1.
        if let Some(asked) = run.census.as_mut().unwrap().foreign_requests.get_mut("b") {
            asked.remove("uid-b1");
        }
        run.now = at(2 * LEASE_DURATION.as_secs() as i64 - 1);
        let step = run.step();
        assert_eq!(
            step.status.part("b").unwrap().claims.len(),
            2,
            "b's agent may still make it"
        );
        run.now = at(1);
        foreign(&mut run, "uid-b1", RequestOutcome::Succeeded);
        let step = run.step();
        let b: Vec<&str> = step
            .status
            .part("b")
            .unwrap()
            .claims
            .iter()
            .map(|c| c.pod.as_str())
            .collect();
        assert_eq!(b, ["b2"]);
        assert_eq!(claimed(&step), ["a1"], "room freed by the released claims");
        all[2].state.ready = true;
        run.status = step.status;
        run.census = Some(census(&all, &["a"]));
        foreign(&mut run, "uid-b2", RequestOutcome::Failed("x".into()));
        assert!(run.step().status.part("b").unwrap().claims.is_empty());
    }

    #[test]
    fn pods_on_nodes_without_an_agent_are_reported_after_the_grace() {
        let all = [
            pod("a1", "a", true),
            pod("n1", "n", true),
            pod("n2", "n", true),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.census = Some(census(&all, &["a"]));
        run.status = run.step().status;
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        run.now = at(LEASE_DURATION.as_secs() as i64 - 1);
        let step = run.step();
        assert!(
            step.status
                .conditions
                .iter()
                .all(|c| c.type_ != CONDITION_WAITING)
        );
        run.now = at(LEASE_DURATION.as_secs() as i64);
        let step = run.step();
        let waiting = step
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_WAITING)
            .unwrap();
        assert_eq!(waiting.status, "True");
        assert_eq!(waiting.message, "waiting for node n: no agent (2 pods)");
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(step.status.done, 1);
        assert!(
            step.takes_part,
            "a's part is vouched for until the rollout ends"
        );
        // An agent comes up on n: it takes its part.
        run.status = step.status;
        let mut on_n = Run::new("n", &all);
        on_n.status = run.status.clone();
        on_n.spec = run.spec.clone();
        on_n.now = run.now;
        on_n.census = Some(census(&all, &["a", "n"]));
        let step = on_n.step();
        assert_eq!(claimed(&step), ["n1", "n2"]);
        let waiting = step
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_WAITING)
            .unwrap();
        assert_eq!(waiting.status, "False");
    }

    #[test]
    fn the_last_node_to_finish_ends_the_rollout() {
        let all = [pod("a1", "a", true), pod("b1", "b", true)];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 2}));
        run.status.nodes.push(NodePart {
            node: "b".into(),
            matched: 1,
            done: 1,
            ..Default::default()
        });
        run.status = run.step().status;
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!((step.status.matched, step.status.done), (2, 2));
        let complete = step
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_COMPLETE)
            .unwrap();
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
        let all = [pod("a1", "a", true)];
        let mut run = Run::new("a", &all);
        run.status = run.step().status;
        // No request made for a1. Claimed at 1 s: still the agent's to make its request at 40 s, not at 41 s.
        run.now = at(LEASE_DURATION.as_secs() as i64);
        assert!(run.step().claimed.is_empty());
        run.now = at(LEASE_DURATION.as_secs() as i64 + 1);
        let step = run.step();
        assert_eq!(
            claimed(&step),
            ["a1"],
            "released, then claimed again at once: {step:#?}"
        );
        assert_eq!(step.claimed[0].since, seconds(run.now));
    }

    #[test]
    fn without_a_census_nothing_is_claimed_but_claims_are_followed() {
        let all = [pod("a1", "a", true), pod("a2", "a", true)];
        let mut run = Run::new("a", &all);
        run.status = run.step().status;
        run.census = None;
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        let step = run.step();
        assert_eq!(step.status.done, 1);
        assert!(step.claimed.is_empty());
    }

    #[test]
    fn a_pods_request_is_its_record_whoever_released_its_claim() {
        let all = [
            pod("a1", "a", true),
            pod("a2", "a", true),
            pod("a3", "a", true),
        ];
        let mut run = Run::new("a", &all);
        // a1's claim was released by another agent while this one was away; a9 was restarted
        // and is gone since.
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        run.ask("uid-a9".into(), RequestOutcome::Failed("boom".into()));
        run.spec = spec(json!({"failurePolicy": {"maxFailedPods": 2}}));
        let step = run.step();
        assert_eq!(claimed(&step), ["a2"], "a1 is not asked twice");
        let part = step.status.part("a").unwrap();
        assert_eq!((part.done, part.matched, part.pending), (1, 4, 1));
        assert_eq!(part.failures, [Failure::new("a9", "uid-a9", "boom")]);
        assert_eq!((step.status.done, step.status.failed), (1, 1));
    }

    #[test]
    fn a_gone_agents_pods_left_are_read_from_its_requests() {
        let mut all = vec![
            pod("a1", "a", true),
            pod("b1", "b", true),
            pod("b2", "b", true),
        ];
        let mut run = Run::new("a", &all);
        run.spec = spec(json!({"maxUnavailable": 3}));
        run.now = at(LEASE_DURATION.as_secs() as i64);
        run.ask("uid-a1".into(), RequestOutcome::Succeeded);
        // b's agent restarted b1 and went away with b2 left.
        run.status.nodes.push(NodePart {
            node: "b".into(),
            matched: 2,
            done: 1,
            pending: 1,
            ..Default::default()
        });
        run.census = Some(census(&all, &["a"]));
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Progressing);
        assert_eq!(
            step.status.message.as_deref(),
            Some("waiting for node b: no agent (1 pods)")
        );
        // b2 is deleted: b's part still says one left, its requests say none.
        all.retain(|p| p.state.name != "b2");
        run.census = Some(census(&all, &["a"]));
        assert_eq!(
            run.step().status.phase,
            RolloutPhase::Progressing,
            "not listed"
        );
        let mut listed = census(&all, &["a"]);
        listed.foreign_requests.insert(
            "b".into(),
            [("uid-b1".to_string(), RequestOutcome::Succeeded)].into(),
        );
        run.census = Some(listed);
        let step = run.step();
        assert_eq!(step.status.phase, RolloutPhase::Succeeded);
        assert_eq!((step.status.matched, step.status.done), (3, 2));
    }

    /// Agents racing over one rollout through a server that orders writes by resourceVersion,
    /// each deciding from a copy that may lag (its watch), while restarts make pods unready:
    /// never more unready pods than the budget, no pod claimed twice, and the rollout ends with
    /// every pod restarted once.
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
            /// Pod UID → its request succeeded.
            requests: HashMap<String, bool>,
            claims_made: HashMap<String, usize>,
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
                    nodes: names,
                    pods,
                    server: (0, RolloutStatus::default()),
                    requests: HashMap::new(),
                    claims_made: HashMap::new(),
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

            fn act(&mut self, agent: usize) {
                self.clock += 1;
                let node = self.nodes[agent].clone();
                let mine: Vec<RolloutPod> = self
                    .pods
                    .iter()
                    .filter(|p| p.node == node)
                    .cloned()
                    .collect();
                // This node's requests only, as its request watch shows them.
                let requests: HashMap<String, NodeRequest> = mine
                    .iter()
                    .filter_map(|p| {
                        let done = self.requests.get(&p.state.uid)?;
                        let outcome = if *done {
                            RequestOutcome::Succeeded
                        } else {
                            RequestOutcome::Underway
                        };
                        Some((
                            p.state.uid.clone(),
                            NodeRequest {
                                pod: p.state.name.clone(),
                                outcome,
                            },
                        ))
                    })
                    .collect();
                let census = census(
                    &self.pods,
                    &self.nodes.iter().map(String::as_str).collect::<Vec<_>>(),
                );
                let (rv, status) = self.copies[agent].clone();
                let step = decide(&Facts {
                    node: &node,
                    now: at(self.clock),
                    generation: Some(1),
                    spec: &self.spec,
                    status: &status,
                    my_pods: &mine,
                    requests: &requests,
                    census: Some(&census),
                });
                if step.status == status || rv != self.server.0 {
                    return;
                }
                self.server = (rv + 1, step.status);
                for claim in step.claimed {
                    *self.claims_made.entry(claim.pod_uid.clone()).or_default() += 1;
                    // The request is made and the stop lands at once: the worst case.
                    self.requests.entry(claim.pod_uid.clone()).or_insert(false);
                    if let Some(p) = self.pods.iter_mut().find(|p| p.state.uid == claim.pod_uid) {
                        p.state.ready = false;
                    }
                }
                self.check();
            }

            /// A restart finishes: the pod is ready again and its request succeeded.
            fn progress(&mut self, which: usize) {
                let underway: Vec<String> = self
                    .requests
                    .iter()
                    .filter(|(_, done)| !**done)
                    .map(|(uid, _)| uid.clone())
                    .collect();
                if underway.is_empty() {
                    return;
                }
                let mut underway = underway;
                underway.sort();
                let uid = underway[which % underway.len()].clone();
                self.requests.insert(uid.clone(), true);
                if let Some(p) = self.pods.iter_mut().find(|p| p.state.uid == uid) {
                    p.state.ready = true;
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            #[test]
            fn racing_agents_never_exceed_the_budget(
                nodes in 2usize..6,
                per_node in 1usize..5,
                max in 1usize..4,
                moves in proptest::collection::vec((0u8..3, 0usize..64), 0..300),
            ) {
                let mut sim = Sim::new(nodes, per_node, max);
                for (kind, which) in moves {
                    match kind {
                        0 => sim.deliver(which % nodes),
                        1 => sim.act(which % nodes),
                        _ => sim.progress(which),
                    }
                }
                // Then everyone in turn until the end.
                for _ in 0..(nodes * per_node * 4 + 10) {
                    if sim.server.1.phase == RolloutPhase::Succeeded {
                        break;
                    }
                    for agent in 0..nodes {
                        sim.deliver(agent);
                        sim.act(agent);
                    }
                    sim.progress(0);
                }
                prop_assert_eq!(sim.server.1.phase, RolloutPhase::Succeeded);
                prop_assert_eq!(sim.server.1.done as usize, nodes * per_node);
                prop_assert!(sim.claims_made.values().all(|n| *n == 1), "{:?}", sim.claims_made);
                prop_assert_eq!(sim.claims_made.len(), nodes * per_node);
                prop_assert!(sim.worst <= max);
            }
        }
    }

    #[test]
    fn left_unasked_counts_pods_neither_terminating_claimed_nor_asked_for() {
        let mut gone = pod("p4", "b", true);
        gone.terminating = true;
        let pods = [
            pod("p1", "b", true),
            pod("p2", "b", true),
            pod("p3", "b", false),
            gone,
        ];
        let pods: Vec<&RolloutPod> = pods.iter().collect();
        let claimed: HashSet<&str> = ["uid-p1"].into();
        assert_eq!(left_unasked(&pods, &claimed, None), 2);
        let asked: NodeRequests = [("uid-p2".to_string(), RequestOutcome::Underway)].into();
        assert_eq!(left_unasked(&pods, &claimed, Some(&asked)), 1);
    }

    #[test]
    fn a_parts_failures_are_in_pod_order() {
        let requests: HashMap<String, NodeRequest> = [
            ("uid-b", "b", RequestOutcome::Failed("no".into())),
            ("uid-a", "a", RequestOutcome::Failed("no".into())),
            ("uid-c", "c", RequestOutcome::Succeeded),
            ("uid-d", "d", RequestOutcome::Underway),
        ]
        .into_iter()
        .map(|(uid, pod, outcome)| {
            (
                uid.to_string(),
                NodeRequest {
                    pod: pod.into(),
                    outcome,
                },
            )
        })
        .collect();
        let mut part = NodePart::default();
        record_outcomes(&mut part, &requests);
        assert_eq!(part.done, 1);
        let failed: Vec<&str> = part.failures.iter().map(|f| f.pod.as_str()).collect();
        assert_eq!(failed, ["a", "b"]);
    }
}
