//! The rollout loop: one watch of every ContainerRestartRollout; for each unfinished one with
//! pods on this node, the facts (the node view, and the census of the namespace and the
//! requests of this node's claims, kept by watches while this node has work there), one
//! [`plan::decide`], and its result written with the resourceVersion it was decided from. The restarts themselves are
//! ContainerRestartRequests, named after the rollout and the pod so that a pod is asked once per
//! rollout whatever happens to the agent; this node's restart-request loop carries them out.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use ::kube::core::{Selector, SelectorExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::sync::{Notify, mpsc};

use super::budget::PodState;
use super::census::rollout_request;
use super::census::{LEASES_PERIOD, NamespaceWatch};
use super::object::{self, Claim, LABEL_AGENT_LEASE, LABEL_ROLLOUT, Rollout, RolloutPhase};
use super::plan::{
    self, Census, Facts, LEASE_DURATION, NodeRequest, NodeRequests, RequestOutcome, RolloutPod,
};
use crate::kube::Watched;
use crate::nodeview::{NodeView, PodView};
use crate::requests::{Context, RequestController, RequestWatch, run_kind};
use crate::restartrequest::object::{self as restart, RestartContainer, RestartSpec};
use crate::restartrequest::restart_request_resource;

/// How often an agent with rollout work renews its Lease.
const LEASE_RENEWAL: Duration = Duration::from_secs(10);
/// After a refused status write, the next try comes at a random point within a window of this
/// much per node taking part (the nodes with a part in the rollout's status), between
/// [`CONFLICT_SPREAD_MIN`] and [`CONFLICT_SPREAD_MAX`]: the agents that lost a race then try
/// again about one at a time, whether there are three of them or a hundred.
const CONFLICT_SPREAD_PER_NODE: Duration = Duration::from_millis(10);
const CONFLICT_SPREAD_MIN: Duration = Duration::from_millis(50);
const CONFLICT_SPREAD_MAX: Duration = Duration::from_secs(1);

fn conflict_spread(nodes: usize) -> Duration {
    CONFLICT_SPREAD_PER_NODE
        .saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX))
        .clamp(CONFLICT_SPREAD_MIN, CONFLICT_SPREAD_MAX)
}

const WORKER: &str = "restart rollouts";

const WATCHED: Watched = Watched {
    resource: "containerrestartrollouts",
    health_key: "ContainerRestartRollouts watch",
    when_not_served: Some(
        "the API server does not serve ContainerRestartRollouts (apply crd-containerrestartrollouts.yaml): none will be carried out until it is",
    ),
};

pub fn rollout_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(object::GROUP, object::VERSION, object::KIND),
        object::PLURAL,
    )
}

/// The request a rollout makes for one pod: the same name whoever makes it and however often.
pub fn request_name(rollout: &str, pod_uid: &str) -> String {
    let mut name: String = rollout.chars().take(253 - pod_uid.len() - 1).collect();
    name.push('-');
    name.push_str(pod_uid);
    name
}

/// What the rollout controller of one agent needs beyond the shared context.
#[derive(Clone, Debug)]
pub struct RolloutConfig {
    /// The node this agent serves: its pods' claims, its Lease.
    pub node_name: String,
}

/// Runs until `shutdown` turns true. Every write is awaited within its pass: nothing is under
/// way at shutdown.
pub async fn run(ctx: Context, config: RolloutConfig) {
    let watch = RequestWatch {
        resource: rollout_resource(),
        // Rollouts name no node: every agent follows every rollout.
        selector: String::new(),
        watched: WATCHED,
        on_event: |_: &_| {},
    };
    let controller = |_: mpsc::Sender<Infallible>| Controller {
        node: config.node_name,
        client: ctx.client.clone(),
        tracked: HashMap::new(),
        leases: HashMap::new(),
        namespaces: HashMap::new(),
        requests_changed: Arc::new(Notify::new()),
    };
    run_kind(ctx.clone(), watch, controller).await;
}

struct Controller {
    node: String,
    client: ::kube::Client,
    /// Rollout UID → what this agent keeps of it between passes.
    tracked: HashMap<String, Tracked>,
    /// Namespace → when this agent's Lease there was last renewed, and the Lease as written:
    /// the next renewal is one write of it while nobody else has changed it.
    leases: HashMap<String, (Instant, Lease)>,
    /// Namespace → its census, kept while this agent has rollout work there.
    namespaces: HashMap<String, NamespaceWatch>,
    /// Notified when one of this node's rollout requests changes.
    requests_changed: Arc<Notify>,
}

#[derive(Default)]
struct Tracked {
    /// Pod UID → pod name of the requests this agent made (or found made): the watch may not
    /// show them yet.
    made: HashMap<String, String>,
    /// The rollout's requests on the nodes of agents that are gone, by node and pod UID, and
    /// when listed.
    foreign_requests: Option<(Instant, HashMap<String, NodeRequests>)>,
    /// A write refused for this resourceVersion: nothing is decided from it again.
    conflicted_at: Option<String>,
    /// After a refused write, not before this: the agents that lost a race do not all try
    /// again on the same new version (each try but one would be refused again).
    write_after: Option<Instant>,
    /// What was last said of why this node waits, so that it is logged once.
    waiting: Option<String>,
}

impl RequestController for Controller {
    type Done = Infallible;
    const WORKER: &'static str = WORKER;

    async fn sync(&mut self, objects: &[Arc<DynamicObject>], view: &NodeView) -> Option<Duration> {
        if !view.synced {
            return Some(Duration::from_millis(200));
        }
        let mut namespaces_taking_part = HashSet::new();
        for object in objects {
            match object::decode(object) {
                Ok(rollout) => {
                    if self.sync_one(object, &rollout, view).await {
                        namespaces_taking_part.insert(rollout.meta.namespace.clone());
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerRestartRollout without identity")
                }
            }
        }
        for namespace in namespaces_taking_part {
            self.renew_lease(&namespace).await;
        }
        self.namespaces.retain(|_, watch| !watch.idle());
        let live: HashSet<&str> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.as_deref())
            .collect();
        self.tracked.retain(|uid, _| live.contains(uid.as_str()));
        // A write put off after a conflict is tried when it is due, not at the next second.
        let now = Instant::now();
        self.tracked
            .values()
            .filter_map(|t| t.write_after)
            .filter(|after| *after > now)
            .min()
            .map(|after| after - now)
    }

    fn finish(&mut self, done: Infallible) {
        match done {}
    }

    /// A change of one of this node's rollout requests, so that a finished one frees its claim
    /// at once rather than at the next second's pass.
    async fn woken(&mut self) {
        self.requests_changed.notified().await;
    }
}

impl Controller {
    /// One rollout; true when this node takes part in it (its agent keeps its Lease).
    async fn sync_one(
        &mut self,
        object: &DynamicObject,
        rollout: &Rollout,
        view: &NodeView,
    ) -> bool {
        if rollout.meta.deleting || rollout.status.phase.is_final() {
            return false;
        }
        let spec = match &rollout.spec {
            Ok(spec) => spec,
            Err(message) => {
                self.refuse(object, rollout, &message.to_string()).await;
                return false;
            }
        };
        let Ok(selector) = Selector::try_from(spec.selector.clone()) else {
            return false;
        };
        let my_pods: Vec<RolloutPod> = view
            .pods
            .iter()
            .filter(|p| p.namespace == rollout.meta.namespace && !p.static_pod)
            .filter_map(|p| rollout_pod(p, &self.node))
            .filter(|p| selector.matches(&p.state.labels))
            .collect();
        let mine = rollout.status.part(&self.node);
        // A part is kept up to date (and its Lease renewed) even when its pods are gone.
        if my_pods.is_empty() && mine.is_none() {
            return false;
        }
        if self.held_back(rollout) {
            return true;
        }
        // A pod without a request has not been asked: nothing is decided before the request
        // watch has listed.
        let Some(mut requests) = self.requests_of(rollout).await else {
            return true;
        };
        // The requests of this node's claims, made if missing.
        if let Some(part) = mine {
            for claim in &part.claims {
                self.make_missing(rollout, spec, claim, view, &mut requests)
                    .await;
            }
        }
        let census = self.census(rollout, &selector).await;
        let step = plan::decide(&Facts {
            node: &self.node,
            now: Timestamp::now(),
            generation: rollout.meta.generation,
            spec,
            status: &rollout.status,
            my_pods: &my_pods,
            requests: &requests,
            census: census.as_ref(),
        });
        self.note_waiting(rollout, step.waiting.as_deref());
        if step.status != rollout.status {
            self.write_step(object, rollout, spec, &step, view, &mut requests)
                .await;
        }
        step.takes_part
    }

    /// Whether nothing is decided of the rollout now: a write of this version was refused (the
    /// watch has not brought the newer one yet), or the write put off after a refusal is not
    /// due yet.
    fn held_back(&self, rollout: &Rollout) -> bool {
        let Some(tracked) = self.tracked.get(&rollout.meta.uid) else {
            return false;
        };
        let rv = &rollout.meta.resource_version;
        (tracked.conflicted_at.is_some() && tracked.conflicted_at == *rv)
            || tracked
                .write_after
                .is_some_and(|after| Instant::now() < after)
    }

    /// This node's requests of the rollout, by pod UID, with those this agent made that the
    /// watch does not show yet; `None` until the namespace's request watch has listed. Starts
    /// the namespace's census watches if they are not running.
    async fn requests_of(&mut self, rollout: &Rollout) -> Option<HashMap<String, NodeRequest>> {
        let namespace = rollout.meta.namespace.as_str();
        let census_source = self
            .namespaces
            .entry(namespace.to_string())
            .or_insert_with(|| {
                NamespaceWatch::start(
                    &self.client,
                    namespace,
                    &self.node,
                    self.requests_changed.clone(),
                )
            });
        census_source.used = Instant::now();
        let mut requests = census_source.requests_of(&rollout.meta.uid)?;
        census_source
            .refresh_live_agents(&self.client, namespace)
            .await;
        let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
        for (pod_uid, pod) in &tracked.made {
            requests.entry(pod_uid.clone()).or_insert(NodeRequest {
                pod: pod.clone(),
                outcome: RequestOutcome::Underway,
            });
        }
        Some(requests)
    }

    /// The census of the rollout's `selector` in its namespace, with the requests on the nodes
    /// of agents that are gone; `None` while the namespace's watches have not listed.
    async fn census(&mut self, rollout: &Rollout, selector: &Selector) -> Option<Census> {
        let namespace = rollout.meta.namespace.as_str();
        let live = self
            .namespaces
            .get(namespace)
            .and_then(|source| source.live_agents().cloned());
        let foreign = match live {
            Some(live) => self.foreign_requests(rollout, &live).await,
            None => HashMap::new(),
        };
        self.namespaces
            .get(namespace)
            .and_then(|source| source.census(selector, foreign))
    }

    /// Logs why this node waits when that changes.
    fn note_waiting(&mut self, rollout: &Rollout, waiting: Option<&str>) {
        if let Some(t) = self.tracked.get_mut(&rollout.meta.uid)
            && t.waiting.as_deref() != waiting
        {
            if let Some(reason) = waiting {
                tracing::info!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                    reason = %reason, "rollout: waiting before restarting more pods here");
            }
            t.waiting = waiting.map(str::to_owned);
        }
    }

    /// Writes the step's status, conditioned on the version it was decided from; once it
    /// lands, makes the requests of the pods it claimed. A refused write is put off.
    async fn write_step(
        &mut self,
        object: &DynamicObject,
        rollout: &Rollout,
        spec: &object::RolloutSpec,
        step: &plan::Decision,
        view: &NodeView,
        requests: &mut HashMap<String, NodeRequest>,
    ) {
        let mut written = object.clone();
        written.data["status"] = match serde_json::to_value(&step.status) {
            Ok(value) => value,
            Err(err) => {
                tracing::error!(error = %err, "cannot encode a rollout's status");
                return;
            }
        };
        match self.replace_status(rollout, &written).await {
            Ok(()) => {
                if let Some(t) = self.tracked.get_mut(&rollout.meta.uid) {
                    t.conflicted_at = None;
                }
                if step.status.phase != rollout.status.phase {
                    tracing::info!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                        phase = ?step.status.phase, message = ?step.status.message, "rollout phase");
                }
                for claim in &step.claimed {
                    tracing::info!(rollout = %rollout.meta.name, pod = %claim.pod,
                        namespace = %rollout.meta.namespace, "rollout: restarting a pod here");
                    self.make_missing(rollout, spec, claim, view, requests)
                        .await;
                }
            }
            Err(Conflict) => self.put_off(rollout),
        }
    }

    /// After a refused write: nothing more is decided from this version, and the next try
    /// comes at a random point of the spread, so that the agents that lost do not race again.
    fn put_off(&mut self, rollout: &Rollout) {
        if let Some(t) = self.tracked.get_mut(&rollout.meta.uid) {
            t.conflicted_at = rollout.meta.resource_version.clone();
            t.write_after = Some(
                Instant::now()
                    + conflict_spread(rollout.status.nodes.len())
                        .mul_f64(rand::random_range(0.0..1.0)),
            );
        }
    }

    async fn replace_status(
        &self,
        rollout: &Rollout,
        written: &DynamicObject,
    ) -> Result<(), Conflict> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &rollout.meta.namespace,
            &rollout_resource(),
        );
        match api
            .replace_status(&rollout.meta.name, &PostParams::default(), written)
            .await
        {
            Ok(_) => Ok(()),
            Err(::kube::Error::Api(status)) if status.code == 409 => Err(Conflict),
            Err(err) => {
                tracing::warn!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                    error = %err, "cannot write the rollout's status; tried again on the next pass");
                Err(Conflict)
            }
        }
    }

    /// A rollout whose spec cannot be carried out: said on its status, once.
    async fn refuse(&mut self, object: &DynamicObject, rollout: &Rollout, message: &str) {
        let message = format!("cannot be carried out: {message}");
        if rollout.status.phase == RolloutPhase::Failed
            && rollout.status.message.as_deref() == Some(&message)
        {
            return;
        }
        let mut status = rollout.status.clone();
        status.phase = RolloutPhase::Failed;
        status.message = Some(message.clone());
        let mut written = object.clone();
        written.data["status"] = serde_json::to_value(&status).unwrap_or(json!({}));
        if self.replace_status(rollout, &written).await.is_ok() {
            tracing::warn!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                message = %message, "refused a ContainerRestartRollout");
        }
    }

    /// Makes the request of a claimed pod if it has none and the claim is fresh (other agents
    /// may release an older one), and the pod is still here.
    async fn make_missing(
        &mut self,
        rollout: &Rollout,
        spec: &object::RolloutSpec,
        claim: &Claim,
        view: &NodeView,
        requests: &mut HashMap<String, NodeRequest>,
    ) {
        let (pod, pod_uid) = (claim.pod.as_str(), claim.pod_uid.as_str());
        if requests.contains_key(pod_uid)
            || !plan::fresh(claim, Timestamp::now())
            || !view.pods.iter().any(|p| p.uid == pod_uid)
        {
            return;
        }
        let name = request_name(&rollout.meta.name, pod_uid);
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &rollout.meta.namespace,
            &restart_request_resource(),
        );
        match make_request(&api, rollout, spec, &name, pod, pod_uid, &self.node).await {
            Ok(()) => {
                self.tracked
                    .entry(rollout.meta.uid.clone())
                    .or_default()
                    .made
                    .insert(pod_uid.to_string(), pod.to_string());
                requests.insert(
                    pod_uid.to_string(),
                    NodeRequest {
                        pod: pod.to_string(),
                        outcome: RequestOutcome::Underway,
                    },
                );
            }
            Err(err) => {
                tracing::warn!(rollout = %rollout.meta.name, pod = %pod, error = %err,
                    "cannot make the pod's ContainerRestartRequest; tried again on the next pass");
            }
        }
    }

    /// The rollout's requests on the nodes of agents that are gone and have a part (listed at
    /// most every [`LEASES_PERIOD`]): what lets another agent release such a node's claims
    /// and know which of its pods are left.
    async fn foreign_requests(
        &mut self,
        rollout: &Rollout,
        live: &HashSet<String>,
    ) -> HashMap<String, NodeRequests> {
        let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
        if let Some((at, known)) = &tracked.foreign_requests
            && at.elapsed() < LEASES_PERIOD
        {
            return known.clone();
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &rollout.meta.namespace,
            &restart_request_resource(),
        );
        let mut known = HashMap::new();
        // An agent keeps its Lease while its node takes part: a part without one is of an
        // agent gone (or of a node whose agent cannot take part).
        for part in &rollout.status.nodes {
            if part.node == self.node || live.contains(&part.node) {
                continue;
            }
            let labels = format!(
                "{}={},{LABEL_ROLLOUT}={}",
                restart::LABEL_NODE_NAME,
                part.node,
                rollout.meta.name
            );
            match api.list(&ListParams::default().labels(&labels)).await {
                Ok(list) => {
                    let asked = list
                        .items
                        .iter()
                        .filter_map(|r| rollout_request(r, &rollout.meta.uid))
                        .map(|(uid, r)| (uid, r.outcome))
                        .collect();
                    known.insert(part.node.clone(), asked);
                }
                Err(err) => {
                    tracing::debug!(node = %part.node, error = %err,
                        "cannot list a gone agent's rollout requests")
                }
            }
        }
        if let Some(t) = self.tracked.get_mut(&rollout.meta.uid) {
            t.foreign_requests = Some((Instant::now(), known.clone()));
        }
        known
    }

    /// Creates or renews this agent's Lease in `namespace` (at most every ten seconds): one
    /// write of the Lease as last written, read afresh only when that is refused.
    async fn renew_lease(&mut self, namespace: &str) {
        if self
            .leases
            .get(namespace)
            .is_some_and(|(at, _)| at.elapsed() < LEASE_RENEWAL)
        {
            return;
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let name = lease_name(&self.node);
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now());
        let renewed = |mut lease: Lease| {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(self.node.clone());
            spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
            spec.renew_time = Some(now.clone());
            lease
        };
        // The Lease as last written, renewed in one write; read afresh when this agent has not
        // written it yet, or someone else changed or deleted it.
        let written = match self.leases.get(namespace) {
            Some((_, lease)) => match api
                .replace(&name, &PostParams::default(), &renewed(lease.clone()))
                .await
            {
                Err(::kube::Error::Api(status)) if status.code == 409 || status.code == 404 => None,
                other => Some(other),
            },
            None => None,
        };
        let result = match written {
            Some(result) => result,
            None => match api.get_opt(&name).await {
                Ok(Some(lease)) => {
                    api.replace(&name, &PostParams::default(), &renewed(lease))
                        .await
                }
                Ok(None) => {
                    let lease: Lease = match serde_json::from_value(json!({
                        "metadata": {
                            "name": name,
                            "labels": {
                                LABEL_AGENT_LEASE: "true",
                                restart::LABEL_NODE_NAME: self.node,
                            },
                        },
                        "spec": {
                            "holderIdentity": self.node,
                            "leaseDurationSeconds": LEASE_DURATION.as_secs(),
                        },
                    })) {
                        Ok(lease) => lease,
                        Err(_) => return,
                    };
                    let mut lease = renewed(lease);
                    if let Some(spec) = lease.spec.as_mut() {
                        spec.acquire_time = Some(now.clone());
                    }
                    api.create(&PostParams::default(), &lease).await
                }
                Err(err) => Err(err),
            },
        };
        match result {
            Ok(lease) => {
                self.leases
                    .insert(namespace.to_string(), (Instant::now(), lease));
            }
            Err(err) => tracing::warn!(namespace = %namespace, error = %err,
                "cannot renew this agent's Lease; other agents may take it for gone"),
        }
    }
}

/// A write refused or failed: decided again from a newer version.
struct Conflict;

pub fn lease_name(node: &str) -> String {
    format!("inplaced-agent-{node}")
}

fn rollout_pod(pod: &PodView, node: &str) -> Option<RolloutPod> {
    let api = pod.api_pod.as_ref()?;
    Some(RolloutPod {
        state: PodState {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            labels: api.metadata.labels.clone().unwrap_or_default(),
            ready: pod.ready_since.is_some(),
        },
        node: node.to_string(),
        created: api.metadata.creation_timestamp.as_ref().map(|t| t.0),
        terminating: pod.terminating,
    })
}

async fn make_request(
    api: &Api<DynamicObject>,
    rollout: &Rollout,
    spec: &object::RolloutSpec,
    name: &str,
    pod: &str,
    pod_uid: &str,
    node: &str,
) -> Result<(), ::kube::Error> {
    let request_spec = RestartSpec {
        pod_name: pod.to_string(),
        pod_uid: Some(pod_uid.to_string()),
        containers: spec
            .containers
            .iter()
            .map(|c| RestartContainer { name: c.clone() })
            .collect(),
        strategy: spec.strategy.clone(),
        ..Default::default()
    };
    let object = json!({
        "apiVersion": format!("{}/{}", restart::GROUP, restart::VERSION),
        "kind": restart::KIND,
        "metadata": {
            "name": name,
            "namespace": rollout.meta.namespace,
            "labels": { restart::LABEL_NODE_NAME: node, LABEL_ROLLOUT: rollout.meta.name },
            // Deleted with the rollout.
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", object::GROUP, object::VERSION),
                "kind": object::KIND,
                "name": rollout.meta.name,
                "uid": rollout.meta.uid,
            }],
        },
        "spec": request_spec,
    });
    let object: DynamicObject =
        serde_json::from_value(object).map_err(::kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        // Made already (by this agent before it restarted): followed as it is.
        Err(::kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conflict_spread_grows_with_the_nodes_taking_part_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(conflict_spread(0), ms(50));
        assert_eq!(conflict_spread(3), ms(50));
        assert_eq!(conflict_spread(20), ms(200));
        assert_eq!(conflict_spread(100), ms(1000));
        assert_eq!(conflict_spread(5000), ms(1000));
    }
}
