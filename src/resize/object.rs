//! The ContainerResizeRequest (inplaced.io/v1alpha1) as the agent reads and writes it
//! (`packaging/kubernetes/crd-containerresizerequests.yaml`). Objects are decoded one by one, so
//! a malformed request is reported on its own status instead of breaking the watch.

use std::collections::BTreeMap;

use ::kube::api::DynamicObject;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::requests::{self, Decoded, NoIdentity, SpecError};
use crate::resources::Resources;

pub(crate) const GROUP: &str = "inplaced.io";
pub(crate) const VERSION: &str = "v1alpha1";
pub(crate) const KIND: &str = "ContainerResizeRequest";
pub(crate) const PLURAL: &str = "containerresizerequests";
/// Creators set it to the pod's `spec.nodeName`; agents watch by it and the admission policy
/// lets an agent write only the requests of its own node.
pub const LABEL_NODE_NAME: &str = "inplaced.io/node-name";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeSpec {
    pub pod_name: String,
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    pub containers: Vec<ResizeContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResizeContainer {
    pub name: String,
    /// A v1 ResourceRequirements restricted to cpu and memory.
    pub resources: Value,
}

/// A container of the request with its desired values decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredContainer {
    pub name: String,
    /// Only the values the request names are set.
    pub resources: Resources,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResizePhase {
    #[default]
    #[serde(rename = "")]
    None,
    Pending,
    InProgress,
    Succeeded,
    Failed,
    /// The kubelet accepted the resize but cannot do it now (the node is full); it retries.
    Deferred,
    /// Cannot be done on this node at all (refused before anything changed).
    Infeasible,
}

impl ResizePhase {
    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            ResizePhase::Succeeded | ResizePhase::Failed | ResizePhase::Infeasible
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ResizePhase::None => "",
            ResizePhase::Pending => "Pending",
            ResizePhase::InProgress => "InProgress",
            ResizePhase::Succeeded => "Succeeded",
            ResizePhase::Failed => "Failed",
            ResizePhase::Deferred => "Deferred",
            ResizePhase::Infeasible => "Infeasible",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actuator {
    /// The kubelet resizes: `pods/resize` (1.32+) or a pod spec patch (1.27–1.31 with the gate).
    Kubelet,
    /// The agent resizes through CRI and the pod cgroup.
    Cri,
}

impl Actuator {
    pub fn as_str(self) -> &'static str {
        match self {
            Actuator::Kubelet => "kubelet",
            Actuator::Cri => "cri",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerPhase {
    #[default]
    Pending,
    InProgress,
    Succeeded,
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeStatus {
    #[serde(default)]
    pub phase: ResizePhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actuator: Option<Actuator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default)]
    pub containers: Vec<ContainerResult>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResult {
    pub name: String,
    #[serde(default)]
    pub phase: ContainerPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How often the resize was applied again after the kubelet replaced the container.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reapplied: i32,
    /// The runtime container the resize was last applied to (`cri` actuator): a running
    /// container with another ID was started from the pod spec and needs it again.
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub container_id: Option<String>,
    /// What was applied, read back (ResourceRequirements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// A request as the controller works with it.
#[derive(Clone, Debug)]
pub struct ResizeRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    pub created_at: Option<Timestamp>,
    pub deleting: bool,
    /// The decoded spec, or why it cannot be used (reported on the status).
    pub spec: Result<ResizeSpec, SpecError>,
    pub status: ResizeStatus,
}

/// More containers than this in one request is refused (the CRD says the same).
pub(crate) const MAX_CONTAINERS: usize = 64;

impl ResizeRequest {
    /// Decodes an object from the API. Only identity is required; a bad spec is kept as its
    /// error so that it can be reported on the object's status.
    pub fn from_object(object: &DynamicObject) -> Result<ResizeRequest, NoIdentity> {
        let Decoded { meta, spec, status } = requests::decode(object, validate)?;
        Ok(ResizeRequest {
            generation: meta.generation,
            created_at: meta.created_at,
            deleting: meta.deleting,
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
            spec,
            status,
        })
    }

    /// The desired values per container (the spec was validated when decoded).
    pub fn desired(&self) -> Vec<DesiredContainer> {
        let Ok(spec) = &self.spec else {
            return Vec::new();
        };
        spec.containers
            .iter()
            .filter_map(|c| {
                Some(DesiredContainer {
                    name: c.name.clone(),
                    resources: Resources::from_requirements(&c.resources).ok()?,
                })
            })
            .collect()
    }
}

/// What the CRD's schema says, checked again: an agent may meet objects written before the
/// CRD was installed or by a client that bypassed validation.
fn validate(spec: ResizeSpec) -> Result<ResizeSpec, String> {
    if spec.pod_name.is_empty() {
        return Err("spec.podName is empty".into());
    }
    if spec.containers.is_empty() {
        return Err("spec.containers is empty: name at least one container".into());
    }
    if spec.containers.len() > MAX_CONTAINERS {
        return Err(format!(
            "spec.containers has {} entries, at most {MAX_CONTAINERS} are allowed",
            spec.containers.len()
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, c) in spec.containers.iter().enumerate() {
        if c.name.is_empty() {
            return Err(format!("spec.containers[{i}].name is empty"));
        }
        if let Some(first) = seen.insert(c.name.as_str(), i) {
            return Err(format!(
                "spec.containers[{i}]: container {:?} is already named by spec.containers[{first}]",
                c.name
            ));
        }
        for (key, value) in c.resources.as_object().into_iter().flatten() {
            if key != "requests" && key != "limits" {
                return Err(format!(
                    "spec.containers[{i}].resources.{key}: only requests and limits can be resized"
                ));
            }
            for resource in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                if resource != "cpu" && resource != "memory" {
                    return Err(format!(
                        "spec.containers[{i}].resources.{key}.{resource}: only cpu and memory can be resized in place"
                    ));
                }
            }
        }
        let resources = Resources::from_requirements(&c.resources)
            .map_err(|e| format!("spec.containers[{i}].resources: {e}"))?;
        if resources == Resources::default() {
            return Err(format!(
                "spec.containers[{i}] ({}) asks for no change: name cpu or memory requests or limits",
                c.name
            ));
        }
        for (what, value) in [
            ("requests.cpu", resources.cpu_request),
            ("limits.cpu", resources.cpu_limit),
            ("requests.memory", resources.memory_request),
            ("limits.memory", resources.memory_limit),
        ] {
            if value.is_some_and(|v| v <= 0) {
                return Err(format!(
                    "spec.containers[{i}].resources.{what} must be greater than zero"
                ));
            }
        }
        if let (Some(request), Some(limit)) = (resources.cpu_request, resources.cpu_limit)
            && request > limit
        {
            return Err(format!(
                "spec.containers[{i}].resources: the cpu request must not exceed the cpu limit"
            ));
        }
        if let (Some(request), Some(limit)) = (resources.memory_request, resources.memory_limit)
            && request > limit
        {
            return Err(format!(
                "spec.containers[{i}].resources: the memory request must not exceed the memory limit"
            ));
        }
    }
    if let Some(seconds) = spec.active_deadline_seconds
        && seconds <= 0
    {
        return Err("spec.activeDeadlineSeconds must be positive".into());
    }
    if let Some(seconds) = spec.ttl_seconds_after_finished
        && seconds < 0
    {
        return Err("spec.ttlSecondsAfterFinished must not be negative".into());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::{crd_status_schema, schema_violations};
    use serde_json::json;

    fn decode_request(json: Value) -> Result<ResizeRequest, String> {
        ResizeRequest::from_object(&crate::requests::object_from_json(json)?)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_status_the_agent_writes_fits_the_crd_schema() {
        let status_schema = crd_status_schema(include_str!(
            "../../packaging/kubernetes/crd-containerresizerequests.yaml"
        ));
        let resources = Resources {
            cpu_request: Some(250),
            cpu_limit: Some(500),
            memory_request: Some(64 << 20),
            memory_limit: Some(100_000_000),
        };
        let phases = [
            ResizePhase::Pending,
            ResizePhase::InProgress,
            ResizePhase::Succeeded,
            ResizePhase::Failed,
            ResizePhase::Deferred,
            ResizePhase::Infeasible,
        ];
        let container_phases = [
            ContainerPhase::Pending,
            ContainerPhase::InProgress,
            ContainerPhase::Succeeded,
            ContainerPhase::Failed,
        ];
        for (i, phase) in phases.into_iter().enumerate() {
            let status = ResizeStatus {
                phase,
                message: Some("why".into()),
                actuator: Some(if i % 2 == 0 {
                    Actuator::Cri
                } else {
                    Actuator::Kubelet
                }),
                observed_generation: Some(3),
                start_time: Some("2026-11-26T18:00:00Z".into()),
                completion_time: Some("2026-11-26T18:00:01Z".into()),
                containers: vec![ContainerResult {
                    name: "app".into(),
                    phase: container_phases[i % container_phases.len()],
                    message: Some("done".into()),
                    reapplied: 2,
                    container_id: Some("containerd://abc".into()),
                    resources: Some(resources.to_requirements()),
                }],
            };
            let value = serde_json::to_value(&status).expect("serializes");
            let violations = schema_violations(&value, &status_schema, "status");
            assert!(violations.is_empty(), "{violations:#?}\n{value:#}");
        }
    }

    fn object(spec: Value) -> Value {
        json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerResizeRequest",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": spec,
        })
    }

    fn spec_error(spec: Value) -> String {
        match decode_request(object(spec)) {
            Ok(request) => match request.spec {
                Ok(spec) => panic!("accepted: {spec:?}"),
                Err(err) => err.to_string(),
            },
            Err(err) => panic!("no identity: {err}"),
        }
    }

    #[test]
    fn decodes_a_request() {
        let request = decode_request(object(json!({
            "podName": "web",
            "podUID": "p1",
            "containers": [{"name": "main", "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}],
        })))
        .expect("identity");
        let spec = request.spec.as_ref().expect("valid spec");
        assert_eq!(spec.pod_name, "web");
        assert_eq!(spec.pod_uid.as_deref(), Some("p1"));
        assert_eq!(request.generation, Some(1));
        let desired = request.desired();
        assert_eq!(desired.len(), 1);
        assert_eq!(desired[0].resources.cpu_limit, Some(500));
        assert_eq!(desired[0].resources.memory_limit, Some(128 * 1024 * 1024));
        assert_eq!(desired[0].resources.cpu_request, None);
        assert_eq!(request.status.phase, ResizePhase::None);
    }

    #[test]
    fn bad_specs_are_kept_as_errors() {
        assert!(spec_error(json!({"podName": "", "containers": []})).contains("podName"));
        assert!(spec_error(json!({"podName": "p", "containers": []})).contains("empty"));
        let dup = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}}},
            {"name": "a", "resources": {"limits": {"cpu": "2"}}}]});
        assert!(spec_error(dup).contains("already named"));
        let gpu = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        assert!(spec_error(gpu).contains("only cpu and memory"));
        let claims = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"claims": [{"name": "x"}]}}]});
        assert!(spec_error(claims).contains("only requests and limits"));
        let garbage = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "lots"}}}]});
        assert!(spec_error(garbage).contains("spec.containers[0].resources"));
        let nothing = json!({"podName": "p", "containers": [{"name": "a", "resources": {}}]});
        assert!(spec_error(nothing).contains("asks for no change"));
        let zero = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"limits": {"memory": "0"}}}]});
        assert!(spec_error(zero).contains("greater than zero"));
        let inverted = json!({"podName": "p", "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]});
        assert!(spec_error(inverted).contains("must not exceed"));
        let wrong_type = json!({"podName": 7, "containers": []});
        assert!(spec_error(wrong_type).contains("invalid spec"));
        let too_many: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("c{i}"), "resources": {"limits": {"cpu": "1"}}}))
            .collect();
        assert!(spec_error(json!({"podName": "p", "containers": too_many})).contains("at most 64"));
        let negative = json!({"podName": "p", "activeDeadlineSeconds": -5, "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}}}]});
        assert!(spec_error(negative).contains("activeDeadlineSeconds"));
    }

    #[test]
    fn identity_is_required() {
        assert!(decode_request(json!({"metadata": {"name": "x"}})).is_err());
        let no_spec = decode_request(json!({
            "metadata": {"name": "x", "namespace": "n", "uid": "u"}}))
        .expect("identity");
        assert_eq!(
            no_spec.spec.err(),
            Some(crate::requests::SpecError::Missing)
        );
    }

    #[test]
    fn status_round_trips_in_the_crd_shape() {
        let status = ResizeStatus {
            phase: ResizePhase::Succeeded,
            actuator: Some(Actuator::Cri),
            containers: vec![ContainerResult {
                name: "main".into(),
                phase: ContainerPhase::Succeeded,
                reapplied: 2,
                container_id: Some("containerd://abc".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let value = serde_json::to_value(&status).expect("serializable");
        assert_eq!(
            value,
            json!({"phase": "Succeeded", "actuator": "cri", "containers": [
                {"name": "main", "phase": "Succeeded", "reapplied": 2, "containerID": "containerd://abc"}]})
        );
        let back: ResizeStatus = serde_json::from_value(value).expect("decodes");
        assert_eq!(back, status);
    }
}
