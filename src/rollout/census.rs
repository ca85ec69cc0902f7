//! The rollout's namespace as the agent that leads its rollouts follows it: its pods, its
//! PodDisruptionBudgets and every request its rollouts made, through three watches (started
//! when the agent takes the lead there, stopped a while after it has none), and the agents'
//! Leases, listed at most every [`LEASES_PERIOD`]. Taking the census from watches makes a
//! claim cost no request but its share of a status write: listing the namespace's pods before
//! each claim (the first design) cost most of the API requests of a restarted pod
//! (BENCHMARKS.md).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::kube::api::{Api, DynamicObject, ListParams};
use ::kube::core::{Selector, SelectorExt};
use ::kube::runtime::reflector::Store;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Deserializer};
use tokio::sync::Notify;

use super::budget::{Budget, PodState};
use super::object::{LABEL_AGENT_LEASE, LABEL_ROLLOUT};
use super::plan::{Asked, Census, RequestOutcome, Requests, RolloutPod};
use crate::restartrequest::object as restart;
use crate::restartrequest::restart_request_resource;

/// The least time between two listings of the agents' Leases (only claims of agents that are
/// gone and nodes without an agent depend on them; a Lease lasts 40 s).
pub(super) const LEASES_PERIOD: Duration = Duration::from_secs(10);

/// One pod of the namespace as the census keeps it: identity, labels, node, readiness, made
/// once as it is read (a census is taken on every pass). The rest of the pod (its spec, its
/// containers' statuses) is dropped as it is read.
#[derive(Clone, Debug)]
pub(super) struct CensusPod {
    /// What the watch's store needs: name, namespace, UID, resourceVersion.
    metadata: ObjectMeta,
    pod: Arc<RolloutPod>,
}

impl<'de> Deserialize<'de> for CensusPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            #[serde(default)]
            node_name: Option<String>,
        }
        // Defaults everywhere: a pod the census cannot read in part is kept, not an error that
        // would make the watch list the namespace again.
        #[derive(Deserialize)]
        struct Condition {
            #[serde(default, rename = "type")]
            type_: String,
            #[serde(default)]
            status: String,
        }
        #[derive(Deserialize, Default)]
        struct Status {
            #[serde(default)]
            conditions: Option<Vec<Condition>>,
        }
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Option<Spec>,
            #[serde(default)]
            status: Option<Status>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let m = wire.metadata;
        let ready = wire
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let pod = Arc::new(RolloutPod {
            state: PodState {
                name: m.name.clone().unwrap_or_default(),
                uid: m.uid.clone().unwrap_or_default(),
                labels: m.labels.unwrap_or_default(),
                ready,
            },
            node: wire.spec.and_then(|s| s.node_name).unwrap_or_default(),
            created: m.creation_timestamp.map(|t| t.0),
            terminating: m.deletion_timestamp.is_some(),
        });
        Ok(CensusPod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                ..Default::default()
            },
            pod,
        })
    }
}

crate::kube::lean_pod_resource!(CensusPod);

/// The watches of one namespace; dropping it stops them.
pub(super) struct NamespaceWatch {
    pods: Store<CensusPod>,
    budgets: Store<PodDisruptionBudget>,
    /// Every ContainerRestartRequest the namespace's rollouts made: how each claim stands, and
    /// each pod's record, without reading each one.
    requests: Store<DynamicObject>,
    listed: [Arc<AtomicBool>; 3],
    tasks: [tokio::task::JoinHandle<()>; 3],
    /// The nodes whose agent held an unexpired Lease when last listed, and when.
    live_agents: Option<(Instant, HashSet<String>)>,
}

impl Drop for NamespaceWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl NamespaceWatch {
    /// Starts the namespace's watches; `requests_changed` is notified when one of the
    /// rollouts' requests changes.
    pub(super) fn start(
        client: &::kube::Client,
        namespace: &str,
        requests_changed: Arc<Notify>,
    ) -> NamespaceWatch {
        let (pods, pods_listed, pods_task) = crate::kube::watch_namespaced(
            Api::<CensusPod>::namespaced(client.clone(), namespace),
            (),
            None,
            "pods",
            || {},
        );
        let (budgets, budgets_listed, budgets_task) = crate::kube::watch_namespaced(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace),
            (),
            None,
            "PodDisruptionBudgets",
            || {},
        );
        let resource = restart_request_resource();
        let labels = LABEL_ROLLOUT.to_string();
        let (requests, requests_listed, requests_task) = crate::kube::watch_namespaced(
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource),
            resource,
            Some(&labels),
            "rollouts' ContainerRestartRequests",
            move || requests_changed.notify_one(),
        );
        NamespaceWatch {
            pods,
            budgets,
            requests,
            listed: [pods_listed, budgets_listed, requests_listed],
            tasks: [
                tokio::spawn(pods_task),
                tokio::spawn(budgets_task),
                tokio::spawn(requests_task),
            ],
            live_agents: None,
        }
    }

    /// The requests of the rollout `uid`, by pod UID, once their watch has listed.
    pub(super) fn requests_of(&self, rollout_uid: &str) -> Option<Requests> {
        if !self.listed[2].load(Ordering::Relaxed) {
            return None;
        }
        Some(
            self.requests
                .state()
                .iter()
                .filter_map(|r| rollout_request(r, rollout_uid))
                .collect(),
        )
    }

    /// Lists the agents' Leases if the last listing is older than [`LEASES_PERIOD`]; a failure
    /// keeps the last listing (said once; the census waits for a first one).
    pub(super) async fn refresh_live_agents(&mut self, client: &::kube::Client, namespace: &str) {
        if self
            .live_agents
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < LEASES_PERIOD)
        {
            return;
        }
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let listed = leases
            .list(&ListParams::default().labels(LABEL_AGENT_LEASE))
            .await;
        match listed {
            Ok(list) => {
                let now = Timestamp::now();
                let live = list
                    .items
                    .into_iter()
                    .filter_map(|lease| {
                        let spec = lease.spec?;
                        let renewed = spec.renew_time?.0;
                        let duration = i64::from(spec.lease_duration_seconds?);
                        (renewed.as_second() + duration > now.as_second())
                            .then_some(spec.holder_identity?)
                    })
                    .collect();
                self.live_agents = Some((Instant::now(), live));
            }
            Err(err) => {
                let hint = match &err {
                    ::kube::Error::Api(status) if status.code == 403 => {
                        ": carrying out rollouts needs the agent's dedicated identity (rbac-dedicated.yaml)"
                    }
                    _ => "",
                };
                tracing::warn!(namespace = %namespace, error = %err,
                    "cannot list the agents' Leases{hint}; claims of agents that may be gone are kept until it can");
                // Tried again at the next period, not on every pass.
                if let Some((at, _)) = self.live_agents.as_mut() {
                    *at = Instant::now();
                }
            }
        }
    }

    /// The census of a rollout's `selector`, once both watches have listed and the Leases have
    /// been listed once; `me` is counted alive whatever its Lease says (it is deciding).
    pub(super) fn census(&self, selector: &Selector, me: &str) -> Option<Census> {
        if !self.listed[..2].iter().all(|l| l.load(Ordering::Relaxed)) {
            return None;
        }
        let mut live_agents = self.live_agents.as_ref()?.1.clone();
        live_agents.insert(me.to_string());
        let pods = self.pods.state();
        let matching = pods
            .iter()
            .filter(|p| selector.matches(&p.pod.state.labels))
            .map(|p| p.pod.clone())
            .collect();
        let mut budgets = Vec::new();
        for pdb in self.budgets.state() {
            match Budget::of(&pdb) {
                Ok(budget) => budgets.push(budget),
                Err(message) => {
                    tracing::warn!(%message, "ignoring a PodDisruptionBudget that cannot be read")
                }
            }
        }
        let namespace_pods = if budgets.is_empty() {
            Vec::new()
        } else {
            pods.iter().map(|p| p.pod.state.clone()).collect()
        };
        Some(Census {
            matching,
            budgets,
            namespace_pods,
            live_agents,
        })
    }
}

/// A request of the rollout `rollout_uid` (its owner), by its pod's UID; `None` for another
/// rollout's (a rollout deleted and made again under its name) or one without a pod UID.
fn rollout_request(object: &DynamicObject, rollout_uid: &str) -> Option<(String, Asked)> {
    let owned = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == rollout_uid);
    let spec = &object.data["spec"];
    let uid = spec["podUID"].as_str().filter(|_| owned)?;
    let pod = spec["podName"].as_str().unwrap_or_default();
    let node = object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(restart::LABEL_NODE_NAME))
        .cloned()
        .unwrap_or_default();
    Some((
        uid.to_string(),
        Asked {
            node,
            pod: pod.to_string(),
            outcome: outcome_of(object),
        },
    ))
}

/// How a request stands.
fn outcome_of(object: &DynamicObject) -> RequestOutcome {
    match restart::RestartRequest::from_object(object) {
        Ok(request) => match request.status.phase {
            restart::RestartPhase::Succeeded => RequestOutcome::Succeeded,
            restart::RestartPhase::Failed => RequestOutcome::Failed(
                request
                    .status
                    .message
                    .unwrap_or_else(|| "its request failed".into()),
            ),
            _ => RequestOutcome::Underway,
        },
        Err(err) => RequestOutcome::Failed(format!("its request cannot be read: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_census_pod_keeps_identity_labels_node_and_readiness_only() {
        let pod: CensusPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1",
                "resourceVersion": "7", "labels": {"app": "web"},
                "annotations": {"big": "x".repeat(1000)},
                "managedFields": [{"manager": "kubelet"}],
                "creationTimestamp": "2026-11-29T08:00:00Z",
                "deletionTimestamp": "2026-11-29T09:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "i"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "ready": true}]}
        }))
        .unwrap();
        assert_eq!(pod.pod.node, "n1");
        assert!(pod.pod.state.ready);
        assert_eq!(pod.pod.state.labels["app"], "web");
        assert!(pod.pod.terminating);
        assert_eq!(
            pod.pod.created,
            Some("2026-11-29T08:00:00Z".parse().unwrap())
        );
        assert!(pod.metadata.annotations.is_none() && pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));

        let unready: CensusPod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"conditions": [{"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"}]}
        }))
        .unwrap();
        assert!(!unready.pod.state.ready && unready.pod.node.is_empty());
        let bare: CensusPod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(!bare.pod.state.ready);
    }
}
