//! The ContainerRecreateRequest (apps.kruise.io v1beta1 where the CRD serves it, as kruise 1.9
//! does, else v1alpha1) as the node agent reads and writes it.
//! Objects are decoded one by one (`requests::decode`), so a malformed CRR is reported on
//! its own status instead of breaking the watch for every other CRR.

use std::collections::BTreeMap;

use ::kube::api::DynamicObject;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::requests::{self, Decoded, NoIdentity, SpecError};
use crate::restart::{ContainerPort, PreStop};

pub(crate) const GROUP: &str = "apps.kruise.io";
/// The versions the agent speaks, preferred first. kruise 1.9 stores v1beta1 and syncs the
/// container statuses into `status.containerStatusSnapshot` and the unready mark into the
/// `PreRecreateGrace` condition, fields v1alpha1's schema does not have (the apiserver prunes
/// them from a v1alpha1 read); kruise up to 1.8 serves only v1alpha1 and writes annotations.
pub(crate) const VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];
/// kruise 1.9's condition whose `lastTransitionTime` is when the pod was marked unready.
pub(crate) const CONDITION_PRE_RECREATE_GRACE: &str = "PreRecreateGrace";
pub(crate) const KIND: &str = "ContainerRecreateRequest";
pub(crate) const PLURAL: &str = "containerrecreaterequests";

pub const LABEL_NODE_NAME: &str = "crr.apps.kruise.io/node-name";
pub const LABEL_POD_UID: &str = "crr.apps.kruise.io/pod-uid";
pub const LABEL_ACTIVE: &str = "crr.apps.kruise.io/active";
pub(crate) const ANNOTATION_SYNC_CONTAINER_STATUSES: &str =
    "crr.apps.kruise.io/sync-container-statuses";
pub const ANNOTATION_UNREADY_ACQUIRED: &str = "crr.apps.kruise.io/unready-acquired";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrrSpec {
    pub pod_name: String,
    pub containers: Vec<CrrContainer>,
    #[serde(default)]
    pub strategy: Option<Strategy>,
    #[serde(default)]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrrContainer {
    pub name: String,
    #[serde(default)]
    pub pre_stop: Option<PreStop>,
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    #[serde(default)]
    pub status_context: Option<StatusContext>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusContext {
    /// `<runtime>://<id>` of the container the request was made against.
    #[serde(rename = "containerID", default)]
    pub container_id: String,
    #[serde(default)]
    pub restart_count: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub ordered_recreate: bool,
    #[serde(default)]
    pub force_recreate: bool,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub unready_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub min_started_seconds: i32,
}

impl Strategy {
    /// failurePolicy Fail (the default): the first failed container completes the request.
    pub(crate) fn fail_fast(&self) -> bool {
        self.failure_policy.as_deref() != Some("Ignore")
    }
}

/// The CRR-level phase. Succeeded/Failed exist only per container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrrPhase {
    #[default]
    #[serde(rename = "")]
    None,
    Pending,
    Recreating,
    Completed,
}

impl CrrPhase {
    /// kruise-daemon's order for picking the one active request of a pod.
    pub(crate) fn weight(self) -> u8 {
        match self {
            CrrPhase::Completed => 1,
            CrrPhase::Recreating => 2,
            CrrPhase::Pending => 3,
            CrrPhase::None => 4,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerPhase {
    #[default]
    Pending,
    Recreating,
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
pub struct CrrStatus {
    #[serde(default)]
    pub phase: CrrPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub container_recreate_states: Vec<ContainerRecreateState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateState {
    pub name: String,
    pub phase: ContainerPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_killed: bool,
}

/// One entry of the manager's `sync-container-statuses` annotation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SyncedContainerStatus {
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(rename = "containerID", default)]
    pub container_id: String,
}

/// What kruise 1.9's manager writes into a v1beta1 status, read apart from [`CrrStatus`] (the
/// part the agent writes back, so that it never writes these).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagerStatus {
    #[serde(default)]
    container_status_snapshot: Option<Vec<SyncedContainerStatus>>,
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    last_transition_time: Option<String>,
}

/// A CRR as the controller works with it: identity, decoded spec and status, the labels and
/// annotations the webhook and manager wrote, and what the manager wrote into its status.
#[derive(Clone, Debug)]
pub struct Crr {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The version the controller decided from: its status writes apply to this one only.
    pub resource_version: Option<String>,
    pub created_at: Option<Timestamp>,
    pub deleting: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: Result<CrrSpec, SpecError>,
    pub status: CrrStatus,
    /// kruise 1.9's `status.containerStatusSnapshot` (v1beta1), when written.
    snapshot: Option<Vec<SyncedContainerStatus>>,
    /// When kruise 1.9's `PreRecreateGrace` condition turned true (v1beta1).
    pre_recreate_grace_since: Option<Timestamp>,
}

impl Crr {
    /// Decodes an object from the API. Only identity is required; a bad spec is kept as its
    /// error so that it can be reported on the object's status.
    pub fn from_object(object: &DynamicObject) -> Result<Crr, NoIdentity> {
        let Decoded { meta, spec, status } = requests::decode(object, validate)?;
        let manager: ManagerStatus = object
            .data
            .get("status")
            .and_then(|s| ManagerStatus::deserialize(s).ok())
            .unwrap_or_default();
        let pre_recreate_grace_since = manager
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_PRE_RECREATE_GRACE && c.status == "True")
            .and_then(|c| c.last_transition_time.as_deref()?.parse().ok());
        Ok(Crr {
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            created_at: meta.created_at,
            deleting: meta.deleting,
            labels: meta.labels,
            annotations: meta.annotations,
            spec,
            status,
            snapshot: manager.container_status_snapshot,
            pre_recreate_grace_since,
        })
    }

    /// The container statuses the manager synced: kruise 1.9's snapshot, or the annotation of
    /// the releases before it.
    pub(crate) fn synced_statuses(&self) -> Vec<SyncedContainerStatus> {
        if let Some(snapshot) = &self.snapshot {
            return snapshot.clone();
        }
        self.annotations
            .get(ANNOTATION_SYNC_CONTAINER_STATUSES)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }

    /// When the manager marked the pod unready: kruise 1.9's condition, or the annotation of the
    /// releases before it.
    pub(crate) fn unready_acquired_at(&self) -> Option<Timestamp> {
        self.pre_recreate_grace_since.or_else(|| {
            self.annotations
                .get(ANNOTATION_UNREADY_ACQUIRED)?
                .parse()
                .ok()
        })
    }
}

/// What the API server's schema would not catch but the agent must refuse before acting.
fn validate(spec: CrrSpec) -> Result<CrrSpec, String> {
    if spec.containers.is_empty() {
        return Err("spec.containers is empty".into());
    }
    let mut seen = std::collections::HashSet::new();
    for c in &spec.containers {
        if c.name.is_empty() {
            return Err("a container in spec.containers has no name".into());
        }
        if !seen.insert(c.name.as_str()) {
            return Err(format!(
                "container {:?} is listed twice in spec.containers",
                c.name
            ));
        }
        if c.status_context
            .as_ref()
            .is_some_and(|s| s.restart_count < 0)
        {
            return Err(format!(
                "container {:?} has a negative statusContext.restartCount",
                c.name
            ));
        }
    }
    if let Some(strategy) = &spec.strategy {
        if strategy
            .termination_grace_period_seconds
            .is_some_and(|s| s < 0)
        {
            return Err("strategy.terminationGracePeriodSeconds is negative".into());
        }
        if strategy.unready_grace_period_seconds.is_some_and(|s| s < 0) {
            return Err("strategy.unreadyGracePeriodSeconds is negative".into());
        }
        if strategy.min_started_seconds < 0 {
            return Err("strategy.minStartedSeconds is negative".into());
        }
        if let Some(policy) = &strategy.failure_policy
            && policy != "Fail"
            && policy != "Ignore"
        {
            return Err(format!(
                "strategy.failurePolicy {policy:?} is neither Fail nor Ignore"
            ));
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_crr(json: serde_json::Value) -> Result<Crr, String> {
        Crr::from_object(&requests::object_from_json(json)?).map_err(|e| e.to_string())
    }
    use serde_json::json;

    fn object(spec: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "r", "namespace": "ns", "uid": "u1",
                            "creationTimestamp": "2026-11-22T06:00:00Z",
                            "labels": {LABEL_POD_UID: "p1"}},
               "spec": spec})
    }

    /// kruise 1.9's v1beta1 status, shaped as its CRD (config/crd/bases) and its manager's
    /// writes have it: the snapshot and the PreRecreateGrace condition take the place of the
    /// annotations, and the agent never writes them back.
    #[test]
    fn reads_what_kruise_1_9_writes_into_a_v1beta1_status() {
        let mut v1beta1 = object(json!({"podName": "web-0", "containers": [{"name": "app"}]}));
        v1beta1["status"] = json!({
            "phase": "Recreating",
            "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true}],
            "containerStatusSnapshot": [{"name": "app", "ready": true, "restartCount": 1,
                                         "containerID": "containerd://new"}],
            "conditions": [
                {"type": "Other", "status": "True", "lastTransitionTime": "2026-11-22T06:00:01Z"},
                {"type": CONDITION_PRE_RECREATE_GRACE, "status": "True",
                 "lastTransitionTime": "2026-11-22T06:00:02Z", "reason": "PodNotReady"},
            ],
        });
        let crr = decode_crr(v1beta1.clone()).unwrap();
        assert_eq!(
            crr.synced_statuses(),
            vec![SyncedContainerStatus {
                name: "app".into(),
                ready: true,
                restart_count: 1,
                container_id: "containerd://new".into(),
            }]
        );
        assert_eq!(
            crr.unready_acquired_at(),
            Some("2026-11-22T06:00:02Z".parse().unwrap())
        );
        let written = serde_json::to_value(&crr.status).unwrap();
        assert_eq!(written.get("containerStatusSnapshot"), None);
        assert_eq!(written.get("conditions"), None);

        // A condition not (yet) true marks nothing.
        v1beta1["status"]["conditions"][1]["status"] = json!("False");
        assert_eq!(decode_crr(v1beta1).unwrap().unready_acquired_at(), None);
    }

    /// kruise up to 1.8 (v1alpha1): the manager's annotations.
    #[test]
    fn reads_what_kruise_1_8_writes_into_annotations() {
        let mut v1alpha1 = object(json!({"podName": "web-0", "containers": [{"name": "app"}]}));
        v1alpha1["metadata"]["annotations"] = json!({
            ANNOTATION_SYNC_CONTAINER_STATUSES:
                r#"[{"name":"app","ready":false,"restartCount":2,"containerID":"containerd://x"}]"#,
            ANNOTATION_UNREADY_ACQUIRED: "2026-11-22T06:00:03Z",
        });
        let crr = decode_crr(v1alpha1).unwrap();
        assert_eq!(crr.synced_statuses()[0].restart_count, 2);
        assert_eq!(
            crr.unready_acquired_at(),
            Some("2026-11-22T06:00:03Z".parse().unwrap())
        );
    }

    #[test]
    fn decodes_the_kruise_shape() {
        let crr = decode_crr(object(json!({
            "podName": "web-0",
            "containers": [{"name": "app", "preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}},
                            "ports": [{"name": "http", "containerPort": 80}],
                            "statusContext": {"containerID": "containerd://abc", "restartCount": 2}}],
            "strategy": {"failurePolicy": "Ignore", "orderedRecreate": true, "forceRecreate": true,
                         "terminationGracePeriodSeconds": 5, "minStartedSeconds": 3},
            "activeDeadlineSeconds": 300
        })))
        .unwrap();
        let spec = crr.spec.unwrap();
        assert_eq!(
            spec.containers[0]
                .status_context
                .as_ref()
                .unwrap()
                .container_id,
            "containerd://abc"
        );
        let strategy = spec.strategy.unwrap();
        assert!(!strategy.fail_fast() && strategy.ordered_recreate && strategy.force_recreate);
        assert_eq!(crr.labels[LABEL_POD_UID], "p1");
        assert_eq!(crr.status.phase, CrrPhase::None);
    }

    #[test]
    fn status_serialises_as_kruise_writes_it() {
        let status = CrrStatus {
            phase: CrrPhase::Recreating,
            completion_time: None,
            message: None,
            container_recreate_states: vec![
                ContainerRecreateState {
                    name: "a".into(),
                    phase: ContainerPhase::Recreating,
                    message: String::new(),
                    is_killed: true,
                },
                ContainerRecreateState {
                    name: "b".into(),
                    phase: ContainerPhase::Pending,
                    message: "not found container on Node".into(),
                    is_killed: false,
                },
            ],
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"phase": "Recreating", "containerRecreateStates": [
                {"name": "a", "phase": "Recreating", "isKilled": true},
                {"name": "b", "phase": "Pending", "message": "not found container on Node"}]})
        );
        let empty: CrrStatus = serde_json::from_value(json!({"phase": ""})).unwrap();
        assert_eq!(empty.phase, CrrPhase::None);
    }

    #[test]
    fn bad_specs_are_errors_not_panics() {
        let cases = [
            (json!({"podName": "p", "containers": []}), "empty"),
            (
                json!({"podName": "p", "containers": [{"name": "a"}, {"name": "a"}]}),
                "twice",
            ),
            (
                json!({"podName": "p", "containers": [{"name": "a"}], "strategy": {"terminationGracePeriodSeconds": -1}}),
                "negative",
            ),
            (
                json!({"podName": "p", "containers": [{"name": "a"}], "strategy": {"failurePolicy": "Retry"}}),
                "Retry",
            ),
            (
                json!({"podName": "p", "containers": [{"name": "a", "statusContext": {"containerID": "containerd://x", "restartCount": -1}}]}),
                "negative statusContext.restartCount",
            ),
            (json!({"podName": "p", "containers": "a"}), "invalid spec"),
            (
                json!({"podName": "p", "containers": [{"name": "a"}], "strategy": {"minStartedSeconds": 1e99}}),
                "invalid spec",
            ),
        ];
        for (spec, expected) in cases {
            let crr = decode_crr(object(spec.clone())).unwrap();
            let err = crr.spec.unwrap_err();
            assert!(err.to_string().contains(expected), "{spec}: {err}");
        }
        assert!(decode_crr(json!({"spec": {}})).is_err());
    }
}
