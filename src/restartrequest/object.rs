//! The ContainerRestartRequest (inplaced.io/v1alpha1) as the agent reads and writes it
//! (`packaging/kubernetes/crd-containerrestartrequests.yaml`). Objects are decoded one by one,
//! so a malformed request is reported on its own status instead of breaking the watch.

use std::collections::BTreeSet;

use ::kube::api::DynamicObject;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::requests::{self, Decoded, NoIdentity, SpecError};

pub(crate) const GROUP: &str = "inplaced.io";
pub(crate) const VERSION: &str = "v1alpha1";
pub(crate) const KIND: &str = "ContainerRestartRequest";
pub(crate) const PLURAL: &str = "containerrestartrequests";
/// The same label as ContainerResizeRequests: the pod's `spec.nodeName`, set by the creator.
pub const LABEL_NODE_NAME: &str = "inplaced.io/node-name";

/// More containers than this in one request is refused (the CRD says the same).
pub(crate) const MAX_CONTAINERS: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartSpec {
    pub pod_name: String,
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// Empty: every app container of the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<RestartContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RestartStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestartContainer {
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartStrategy {
    /// One container at a time, in the request's order, each ready before the next stops.
    #[serde(default)]
    pub ordered_restart: bool,
    /// How long a new container must have run, and been ready, to count as restarted.
    #[serde(default)]
    pub min_started_seconds: i64,
    /// Overrides the pod's grace period for these stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPhase {
    #[default]
    #[serde(rename = "")]
    None,
    Pending,
    Restarting,
    Succeeded,
    Failed,
}

impl RestartPhase {
    pub fn is_final(self) -> bool {
        matches!(self, RestartPhase::Succeeded | RestartPhase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartPhase::None => "",
            RestartPhase::Pending => "Pending",
            RestartPhase::Restarting => "Restarting",
            RestartPhase::Succeeded => "Succeeded",
            RestartPhase::Failed => "Failed",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerPhase {
    #[default]
    Pending,
    Restarting,
    Succeeded,
    Failed,
}

impl ContainerPhase {
    pub(crate) fn is_final(self) -> bool {
        matches!(self, ContainerPhase::Succeeded | ContainerPhase::Failed)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartStatus {
    #[serde(default)]
    pub phase: RestartPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pod the agent acted on (its UID when the request was taken up).
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default)]
    pub containers: Vec<ContainerRestartState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRestartState {
    pub name: String,
    #[serde(default)]
    pub phase: ContainerPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `<runtime>://<id>` of the container that was stopped.
    #[serde(
        default,
        rename = "oldContainerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub old_container_id: Option<String>,
    /// `<runtime>://<id>` of the container the kubelet started in its place.
    #[serde(
        default,
        rename = "newContainerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub new_container_id: Option<String>,
    /// When the agent first saw the pod report the new container ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_time: Option<String>,
}

/// A request as the controller works with it.
#[derive(Clone, Debug)]
pub struct RestartRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The version decided from: status writes apply to this one only.
    pub resource_version: Option<String>,
    pub created_at: Option<Timestamp>,
    pub deleting: bool,
    /// The node label, as the creator wrote it.
    pub node_label: Option<String>,
    /// The decoded spec, or why it cannot be used (reported on the status).
    pub spec: Result<RestartSpec, SpecError>,
    pub status: RestartStatus,
}

impl RestartRequest {
    /// Decodes an object from the API. Only identity is required; a bad spec is kept as its
    /// error so that it can be reported on the object's status.
    pub fn from_object(object: &DynamicObject) -> Result<RestartRequest, NoIdentity> {
        let Decoded { meta, spec, status } = requests::decode(object, validate)?;
        Ok(RestartRequest {
            node_label: meta.labels.get(LABEL_NODE_NAME).cloned(),
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            created_at: meta.created_at,
            deleting: meta.deleting,
            spec,
            status,
        })
    }
}

/// What the CRD's schema says, checked again: an agent may meet objects written before the
/// CRD was installed or by a client that bypassed validation.
fn validate(spec: RestartSpec) -> Result<RestartSpec, String> {
    if spec.pod_name.is_empty() {
        return Err("spec.podName is empty".into());
    }
    if spec.containers.len() > MAX_CONTAINERS {
        return Err(format!(
            "spec.containers has {} entries, at most {MAX_CONTAINERS} are allowed",
            spec.containers.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in spec.containers.iter().enumerate() {
        if c.name.is_empty() {
            return Err(format!("spec.containers[{i}].name is empty"));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(format!(
                "spec.containers[{i}]: container {:?} is listed twice",
                c.name
            ));
        }
    }
    if let Some(strategy) = &spec.strategy {
        if strategy.min_started_seconds < 0 {
            return Err("spec.strategy.minStartedSeconds must not be negative".into());
        }
        if strategy
            .termination_grace_period_seconds
            .is_some_and(|s| s < 0)
        {
            return Err("spec.strategy.terminationGracePeriodSeconds must not be negative".into());
        }
    }
    if spec.active_deadline_seconds.is_some_and(|s| s <= 0) {
        return Err("spec.activeDeadlineSeconds must be positive".into());
    }
    if spec.ttl_seconds_after_finished.is_some_and(|s| s < 0) {
        return Err("spec.ttlSecondsAfterFinished must not be negative".into());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn decode(spec: Value) -> RestartRequest {
        let object = json!({"metadata": {"name": "r", "namespace": "ns", "uid": "u1",
                                          "labels": {LABEL_NODE_NAME: "n1"}},
                            "spec": spec});
        RestartRequest::from_object(&requests::object_from_json(object).unwrap()).unwrap()
    }

    #[test]
    fn decodes_the_documented_shape() {
        let request = decode(json!({
            "podName": "web-0", "podUID": "p1", "containers": [{"name": "app"}, {"name": "side"}],
            "strategy": {"orderedRestart": true, "minStartedSeconds": 5, "terminationGracePeriodSeconds": 3},
            "activeDeadlineSeconds": 300, "ttlSecondsAfterFinished": 60}));
        let spec = request.spec.unwrap();
        assert_eq!(spec.pod_uid.as_deref(), Some("p1"));
        assert_eq!(spec.containers.len(), 2);
        let strategy = spec.strategy.unwrap();
        assert!(strategy.ordered_restart);
        assert_eq!(strategy.min_started_seconds, 5);
        assert_eq!(request.node_label.as_deref(), Some("n1"));
        assert_eq!(request.status.phase, RestartPhase::None);
        // Containers may be left out: every app container.
        assert!(decode(json!({"podName": "p"})).spec.is_ok());
    }

    #[test]
    fn status_serialises_with_the_documented_names() {
        let status = RestartStatus {
            phase: RestartPhase::Restarting,
            pod_uid: Some("p1".into()),
            containers: vec![ContainerRestartState {
                name: "app".into(),
                phase: ContainerPhase::Succeeded,
                old_container_id: Some("containerd://a".into()),
                new_container_id: Some("containerd://b".into()),
                ready_time: Some("2026-11-28T10:00:00Z".into()),
                message: None,
            }],
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"phase": "Restarting", "podUID": "p1", "containers": [{"name": "app",
                   "phase": "Succeeded", "oldContainerID": "containerd://a",
                   "newContainerID": "containerd://b", "readyTime": "2026-11-28T10:00:00Z"}]})
        );
    }

    #[test]
    fn every_status_the_agent_writes_fits_the_crd_schema() {
        use crate::requests::{crd_status_schema, schema_violations};
        let schema = crd_status_schema(include_str!(
            "../../packaging/kubernetes/crd-containerrestartrequests.yaml"
        ));
        let phases = [
            RestartPhase::Pending,
            RestartPhase::Restarting,
            RestartPhase::Succeeded,
            RestartPhase::Failed,
        ];
        let container_phases = [
            ContainerPhase::Pending,
            ContainerPhase::Restarting,
            ContainerPhase::Succeeded,
            ContainerPhase::Failed,
        ];
        for (phase, container_phase) in phases.into_iter().zip(container_phases) {
            let status = RestartStatus {
                phase,
                message: Some("why".into()),
                pod_uid: Some("p1".into()),
                start_time: Some("2026-11-28T10:00:00Z".into()),
                completion_time: Some("2026-11-28T10:00:05Z".into()),
                containers: vec![ContainerRestartState {
                    name: "app".into(),
                    phase: container_phase,
                    message: Some("waiting".into()),
                    old_container_id: Some("containerd://a".into()),
                    new_container_id: Some("containerd://b".into()),
                    ready_time: Some("2026-11-28T10:00:04Z".into()),
                }],
            };
            let value = serde_json::to_value(&status).unwrap();
            let violations = schema_violations(&value, &schema, "status");
            assert!(violations.is_empty(), "{violations:#?}\n{value:#}");
        }
    }

    #[test]
    fn bad_specs_are_errors_not_panics() {
        let cases = [
            (json!({"podName": ""}), "podName is empty"),
            (
                json!({"podName": "p", "containers": [{"name": ""}]}),
                "name is empty",
            ),
            (
                json!({"podName": "p", "containers": [{"name": "a"}, {"name": "a"}]}),
                "listed twice",
            ),
            (
                json!({"podName": "p", "strategy": {"minStartedSeconds": -1}}),
                "minStartedSeconds",
            ),
            (
                json!({"podName": "p", "strategy": {"terminationGracePeriodSeconds": -1}}),
                "terminationGracePeriodSeconds",
            ),
            (
                json!({"podName": "p", "activeDeadlineSeconds": 0}),
                "positive",
            ),
            (
                json!({"podName": "p", "ttlSecondsAfterFinished": -1}),
                "negative",
            ),
            (json!({"podName": "p", "containers": "app"}), "invalid spec"),
            (json!({"podName": 7}), "invalid spec"),
            (
                json!({"podName": "p", "strategy": {"minStartedSeconds": 1e99}}),
                "invalid spec",
            ),
        ];
        for (spec, expected) in cases {
            let err = decode(spec.clone()).spec.unwrap_err();
            assert!(err.to_string().contains(expected), "{spec}: {err}");
        }
        let many: Vec<Value> = (0..65).map(|i| json!({"name": format!("c{i}")})).collect();
        let err = decode(json!({"podName": "p", "containers": many}))
            .spec
            .unwrap_err();
        assert!(err.to_string().contains("at most 64"), "{err}");
    }
}
