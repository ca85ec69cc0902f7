//! The rollout loop: one watch of every ContainerRestartRollout. Every agent whose node takes
//! part in an unfinished rollout holds its own Lease and makes the ContainerRestartRequests of
//! its node's claims as the rollout's status names them (this node's restart-request loop
//! carries them out; a request is named after the rollout and the pod, so a pod is asked once
//! per rollout whatever happens to the agents). One agent per namespace, the holder of its
//! leader Lease ([`super::lease`]), also decides: it keeps the census of the namespace and
//! every request of its rollouts by watches, runs [`plan::decide`] over every node, and writes
//! the result with the resourceVersion it was decided from, at most once per write interval, so
//! that the claims and releases of many nodes go out in one write.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use ::kube::core::{Selector, SelectorExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::sync::{Notify, mpsc};

use super::census::NamespaceWatch;
use super::lease::{LEASE_RENEWAL, Leadership, renew_agent_lease};
use super::object::{self, Claim, LABEL_ROLLOUT, Rollout, RolloutPhase, RolloutSpec};
use super::plan::{self, Census, Facts, Requests};
use crate::kube::Watched;
use crate::nodeview::NodeView;
use crate::requests::{Context, RequestController, RequestWatch, run_kind};
use crate::restartrequest::object::{self as restart, RestartContainer, RestartSpec};
use crate::restartrequest::restart_request_resource;

/// The least time between two status writes of one rollout by its leader: every write goes
/// to every agent's watch, so the claims and releases of that time go out in one write. It
/// grows with the agents taking part (each write costs each of them a read of it), within
/// bounds.
const WRITE_INTERVAL_PER_AGENT: Duration = Duration::from_millis(1);
const WRITE_INTERVAL_MIN: Duration = Duration::from_millis(50);
const WRITE_INTERVAL_MAX: Duration = Duration::from_secs(1);
/// After a write refused for another reason than a conflict (kube-apiserver's admission may
/// not see this agent's new leader Lease for a moment), it is tried again this much later.
const RETRY_REFUSED_WRITE: Duration = Duration::from_millis(250);
/// A namespace's leadership and census outlive the agent's last work there by this much (a
/// rollout ending and the next one starting neither list the namespace nor elect again).
const LINGER: Duration = Duration::from_secs(60);

fn write_interval(agents: usize) -> Duration {
    WRITE_INTERVAL_PER_AGENT
        .saturating_mul(u32::try_from(agents).unwrap_or(u32::MAX))
        .clamp(WRITE_INTERVAL_MIN, WRITE_INTERVAL_MAX)
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
        agent_leases: HashMap::new(),
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
    /// Namespace → when this agent's own Lease there was last renewed, and the Lease as
    /// written: the next renewal is one write of it while nobody else has changed it.
    agent_leases: HashMap<String, (Instant, Lease)>,
    /// Namespace → this agent's part in leading its rollouts, while it has work there.
    namespaces: HashMap<String, Namespace>,
    /// Notified when one of the led rollouts' requests changes.
    requests_changed: Arc<Notify>,
}

struct Namespace {
    leadership: Leadership,
    /// The census, kept while this agent leads the namespace.
    census: Option<NamespaceWatch>,
    /// When this agent last had work here.
    used: Instant,
}

#[derive(Default)]
struct Tracked {
    /// Pod UIDs of this node's claims whose request this agent made (or found made).
    made: HashSet<String>,
    /// The resourceVersion last seen: a new one shows the leader at work.
    seen_version: Option<String>,
    /// A write refused for this resourceVersion: nothing is decided from it again.
    conflicted_at: Option<String>,
    /// The leader's next write of it, not before this.
    next_write: Option<Instant>,
    /// What was last said of why the rollout waits, so that it is logged once.
    waiting: Option<String>,
}

impl Tracked {
    /// The leader writes nothing of the rollout now: a write of this version was refused (the
    /// watch has not brought the newer one yet), or the next write is not due.
    fn held_back(&self, rollout: &Rollout) -> bool {
        (self.conflicted_at.is_some() && self.conflicted_at == rollout.meta.resource_version)
            || self.next_write.is_some_and(|at| Instant::now() < at)
    }
}

/// One unfinished rollout of a namespace, as the pass read it.
struct Unfinished<'o> {
    object: &'o DynamicObject,
    rollout: Rollout,
}

impl RequestController for Controller {
    type Done = Infallible;
    const WORKER: &'static str = WORKER;

    async fn sync(&mut self, objects: &[Arc<DynamicObject>], view: &NodeView) -> Option<Duration> {
        if !view.synced {
            return Some(Duration::from_millis(200));
        }
        let mut by_namespace: HashMap<String, Vec<Unfinished>> = HashMap::new();
        let mut work = HashSet::new();
        for object in objects {
            let rollout = match object::decode(object) {
                Ok(rollout) => rollout,
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerRestartRollout without identity");
                    continue;
                }
            };
            if rollout.meta.deleting || rollout.status.phase.is_final() {
                continue;
            }
            let namespace = rollout.meta.namespace.clone();
            // A spec that cannot be carried out needs a leader to say so.
            let takes_part = match &rollout.spec {
                Ok(spec) => self.carry_out(&rollout, spec, view).await,
                Err(_) => true,
            };
            // A leader leads every unfinished rollout of its namespace, its node's or not.
            let leads_here = self
                .namespaces
                .get(&namespace)
                .is_some_and(|n| n.leadership.leads());
            if takes_part || leads_here {
                work.insert(namespace.clone());
            }
            by_namespace
                .entry(namespace)
                .or_default()
                .push(Unfinished { object, rollout });
        }
        for namespace in &work {
            self.renew_agent_lease(namespace).await;
            self.refresh_leadership(namespace, &by_namespace).await;
        }
        for (namespace, rollouts) in &by_namespace {
            if work.contains(namespace)
                && self
                    .namespaces
                    .get(namespace)
                    .is_some_and(|n| n.leadership.leads())
            {
                self.lead(namespace, rollouts).await;
            }
        }
        self.namespaces.retain(|_, n| n.used.elapsed() < LINGER);
        for namespace in self.namespaces.values_mut() {
            if !namespace.leadership.leads() {
                namespace.census = None;
            }
        }
        let live: HashSet<&str> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.as_deref())
            .collect();
        self.tracked.retain(|uid, _| live.contains(uid.as_str()));
        self.next_due(&work)
    }

    fn finish(&mut self, done: Infallible) {
        match done {}
    }

    /// A change of one of the led rollouts' requests, so that a finished one frees its claim
    /// at the next write rather than at the next second's pass.
    async fn woken(&mut self) {
        self.requests_changed.notified().await;
    }
}

impl Controller {
    /// This node's part in one rollout: the requests of its claims, made if missing. True when
    /// the node takes part (pods of the rollout here, or a part): its agent holds its Lease and
    /// may lead.
    async fn carry_out(&mut self, rollout: &Rollout, spec: &RolloutSpec, view: &NodeView) -> bool {
        let Ok(selector) = Selector::try_from(spec.selector.clone()) else {
            return false;
        };
        let pods_here = view.pods.iter().any(|p| {
            p.namespace == rollout.meta.namespace
                && !p.static_pod
                && p.api_pod.as_ref().is_some_and(|api| {
                    selector.matches(api.metadata.labels.as_ref().unwrap_or(&Default::default()))
                })
        });
        let part = rollout.status.part(&self.node);
        if !pods_here && part.is_none() {
            return false;
        }
        let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
        if tracked.seen_version != rollout.meta.resource_version {
            tracked.seen_version = rollout.meta.resource_version.clone();
            if let Some(namespace) = self.namespaces.get_mut(&rollout.meta.namespace) {
                namespace.leadership.leader_seen_at_work();
            }
        }
        if let Some(part) = part {
            for claim in &part.claims {
                self.make_missing(rollout, spec, claim, view).await;
            }
        }
        true
    }

    /// Renews this agent's own Lease in `namespace` (at most every [`LEASE_RENEWAL`]).
    async fn renew_agent_lease(&mut self, namespace: &str) {
        let last = self.agent_leases.get(namespace);
        if last.is_some_and(|(at, _)| at.elapsed() < LEASE_RENEWAL) {
            return;
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        match renew_agent_lease(&api, &self.node, last.map(|(_, lease)| lease)).await {
            Ok(lease) => {
                self.agent_leases
                    .insert(namespace.to_string(), (Instant::now(), lease));
            }
            Err(err) => tracing::warn!(namespace = %namespace, error = %err,
                "cannot renew this agent's Lease; the leader takes this node for gone until it can"),
        }
    }

    /// Takes or renews the namespace's leadership, or looks whether it is free, when due.
    async fn refresh_leadership(
        &mut self,
        namespace: &str,
        by_namespace: &HashMap<String, Vec<Unfinished<'_>>>,
    ) {
        let entry = self
            .namespaces
            .entry(namespace.to_string())
            .or_insert_with(|| Namespace {
                leadership: Leadership::new(),
                census: None,
                used: Instant::now(),
            });
        entry.used = Instant::now();
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let was_leading = entry.leadership.leads();
        entry.leadership.refresh(&api, &self.node, namespace).await;
        if entry.leadership.leads() && !was_leading {
            // Decided afresh: nothing known of what an earlier term of this agent wrote.
            for unfinished in by_namespace.get(namespace).into_iter().flatten() {
                if let Some(t) = self.tracked.get_mut(&unfinished.rollout.meta.uid) {
                    t.conflicted_at = None;
                    t.next_write = None;
                }
            }
        }
    }

    /// The leader's pass over the namespace's unfinished rollouts.
    async fn lead(&mut self, namespace: &str, rollouts: &[Unfinished<'_>]) {
        let Some(entry) = self.namespaces.get_mut(namespace) else {
            return;
        };
        let census_source = entry.census.get_or_insert_with(|| {
            NamespaceWatch::start(&self.client, namespace, self.requests_changed.clone())
        });
        census_source
            .refresh_live_agents(&self.client, namespace)
            .await;
        // The facts of each rollout first, then the writes (which borrow the controller).
        let mut decided = Vec::new();
        for unfinished in rollouts {
            let rollout = &unfinished.rollout;
            // Nothing to decide while a write is held back: the census is not taken either.
            if self
                .tracked
                .get(&rollout.meta.uid)
                .is_some_and(|t| t.held_back(rollout))
            {
                continue;
            }
            let spec = match &rollout.spec {
                Ok(spec) => spec,
                Err(message) => {
                    decided.push((unfinished, Err(message.to_string())));
                    continue;
                }
            };
            let Ok(selector) = Selector::try_from(spec.selector.clone()) else {
                continue;
            };
            let facts = census_source
                .requests_of(&rollout.meta.uid)
                .zip(census_source.census(&selector, &self.node));
            if let Some(facts) = facts {
                decided.push((unfinished, Ok((spec, facts))));
            }
        }
        for (unfinished, facts) in decided {
            match facts {
                Ok((spec, (requests, census))) => {
                    self.decide_and_write(unfinished, spec, &requests, &census)
                        .await
                }
                Err(message) => {
                    self.refuse(unfinished.object, &unfinished.rollout, &message)
                        .await
                }
            }
        }
    }

    /// One rollout decided and, if its status changes and a write is due, written.
    async fn decide_and_write(
        &mut self,
        unfinished: &Unfinished<'_>,
        spec: &RolloutSpec,
        requests: &Requests,
        census: &Census,
    ) {
        let rollout = &unfinished.rollout;
        self.tracked.entry(rollout.meta.uid.clone()).or_default();
        let decision = plan::decide(&Facts {
            now: Timestamp::now(),
            generation: rollout.meta.generation,
            spec,
            status: &rollout.status,
            census,
            requests,
        });
        self.note_waiting(rollout, decision.waiting.as_deref());
        if decision.status == rollout.status {
            return;
        }
        let interval = write_interval(census.live_agents.len());
        match self
            .write_status(unfinished.object, rollout, &decision.status)
            .await
        {
            Written::Yes => {
                let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
                tracked.conflicted_at = None;
                tracked.next_write = Some(Instant::now() + interval);
                if decision.status.phase != rollout.status.phase {
                    tracing::info!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                        phase = ?decision.status.phase, message = ?decision.status.message, "rollout phase");
                }
                tracing::debug!(rollout = %rollout.meta.name, claimed = decision.claimed.len(),
                    "rollout: status written");
            }
            Written::Conflict => {
                let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
                tracked.conflicted_at = rollout.meta.resource_version.clone();
            }
            Written::Refused => {
                let tracked = self.tracked.entry(rollout.meta.uid.clone()).or_default();
                tracked.next_write = Some(Instant::now() + RETRY_REFUSED_WRITE);
            }
        }
    }

    /// The earliest of what this agent waits for: a leader's write put off, a look at or a
    /// renewal of a leader Lease.
    fn next_due(&self, work: &HashSet<String>) -> Option<Duration> {
        let now = Instant::now();
        let writes = self.tracked.values().filter_map(|t| t.next_write);
        let leases = self
            .namespaces
            .iter()
            .filter(|(namespace, _)| work.contains(*namespace))
            .map(|(_, n)| n.leadership.due());
        writes
            .chain(leases)
            .filter(|at| *at > now)
            .min()
            .map(|at| at - now)
    }

    /// Logs why the rollout waits when that changes.
    fn note_waiting(&mut self, rollout: &Rollout, waiting: Option<&str>) {
        if let Some(t) = self.tracked.get_mut(&rollout.meta.uid)
            && t.waiting.as_deref() != waiting
        {
            if let Some(reason) = waiting {
                tracing::info!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                    reason = %reason, "rollout: waiting before restarting more pods");
            }
            t.waiting = waiting.map(str::to_owned);
        }
    }

    /// Writes `status` with a PUT conditioned on the resourceVersion it was decided from.
    async fn write_status(
        &self,
        object: &DynamicObject,
        rollout: &Rollout,
        status: &object::RolloutStatus,
    ) -> Written {
        let mut written = object.clone();
        written.data["status"] = match serde_json::to_value(status) {
            Ok(value) => value,
            Err(err) => {
                tracing::error!(error = %err, "cannot encode a rollout's status");
                return Written::Refused;
            }
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &rollout.meta.namespace,
            &rollout_resource(),
        );
        match api
            .replace_status(&rollout.meta.name, &PostParams::default(), &written)
            .await
        {
            Ok(_) => Written::Yes,
            Err(::kube::Error::Api(status)) if status.code == 409 => Written::Conflict,
            Err(err) => {
                tracing::warn!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                    error = %err, "cannot write the rollout's status; tried again shortly");
                Written::Refused
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
        if self.write_status(object, rollout, &status).await == Written::Yes {
            tracing::warn!(rollout = %rollout.meta.name, namespace = %rollout.meta.namespace,
                message = %message, "refused a ContainerRestartRollout");
        }
    }

    /// Makes the request of one of this node's claims if this agent has not, the claim is
    /// fresh (the leader may release an older one) and the pod is still here.
    async fn make_missing(
        &mut self,
        rollout: &Rollout,
        spec: &RolloutSpec,
        claim: &Claim,
        view: &NodeView,
    ) {
        let (pod, pod_uid) = (claim.pod.as_str(), claim.pod_uid.as_str());
        let made = self
            .tracked
            .get(&rollout.meta.uid)
            .is_some_and(|t| t.made.contains(pod_uid));
        if made
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
                tracing::info!(rollout = %rollout.meta.name, pod = %pod,
                    namespace = %rollout.meta.namespace, "rollout: restarting a pod here");
                self.tracked
                    .entry(rollout.meta.uid.clone())
                    .or_default()
                    .made
                    .insert(pod_uid.to_string());
            }
            Err(err) => {
                tracing::warn!(rollout = %rollout.meta.name, pod = %pod, error = %err,
                    "cannot make the pod's ContainerRestartRequest; tried again on the next pass");
            }
        }
    }
}

/// How a status write ended.
#[derive(Debug, PartialEq)]
enum Written {
    Yes,
    /// The rollout changed since it was read: decided again from the newer version.
    Conflict,
    /// Refused or failed otherwise: tried again shortly.
    Refused,
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
    fn the_write_interval_grows_with_the_agents_taking_part_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(write_interval(0), ms(50));
        assert_eq!(write_interval(3), ms(50));
        assert_eq!(write_interval(100), ms(100));
        assert_eq!(write_interval(1000), ms(1000));
        assert_eq!(write_interval(5000), ms(1000));
    }
}
