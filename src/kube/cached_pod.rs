//! The pod as the agent's watch cache holds it, one for every pod of the node: what the agent
//! reads and nothing more. Container specs are kept as their JSON, which is what the hashes are
//! computed from; a controller decodes from it only the fields it reads. k8s-openapi's
//! `Pod` decodes a pod into several times the size of its JSON (every `Container` is large
//! before its strings); this type holds it in about the JSON's size (BENCHMARKS.md, "Memory").

use k8s_openapi::api::core::v1::{PodCondition, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// A pod of this node. Serializes as the pod-shaped JSON of the fields it keeps.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CachedPod {
    /// Without `managedFields`.
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<CachedPodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedPodStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub containers: Vec<CachedContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<CachedContainer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_containers: Option<Vec<CachedContainer>>,
    /// `Always` when absent (the API's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// The grace a ContainerRestartRequest's stop gets unless it names its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// One container's spec: its name, and the spec as JSON (the API's fields, keys in any order).
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct CachedContainer {
    #[serde(skip)]
    name: String,
    json: Box<RawValue>,
}

/// What the agent reads of `status`: kubelet's view of the containers, the conditions, the pod's
/// IP and the pre-1.33 resize state.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<CachedContainerStatus>>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub container_id: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub ready: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub restart_count: i32,
    /// What kubelet reports as applied (1.27+ with in-place resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Only whether the kubelet reports it running is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CachedContainerState>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CachedContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Running>,
}

/// `state.running`, its fields (`startedAt`) not kept.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Running {}

impl CachedContainer {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The spec as JSON: the input of the hashes.
    pub fn json(&self) -> &str {
        self.json.get()
    }

    /// The spec decoded into `T`: a struct of just the fields the caller reads (the others
    /// are skipped, not built), or k8s-openapi's `Container` for all of them.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.json.get())
    }
}

impl PartialEq for CachedContainer {
    fn eq(&self, other: &Self) -> bool {
        self.json.get() == other.json.get()
    }
}

impl<'de> Deserialize<'de> for CachedContainer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a Value (not RawValue straight away): a watch event may arrive with its
        // object before its type, and serde then buffers the object, which a RawValue rejects.
        let value = serde_json::Value::deserialize(deserializer)?;
        let name = match value.get("name") {
            Some(serde_json::Value::String(name)) => name.clone(),
            Some(_) => return Err(D::Error::custom("a container's name is not a string")),
            None if value.is_object() => return Err(D::Error::missing_field("name")),
            None => return Err(D::Error::custom("a container is not a JSON object")),
        };
        let json = RawValue::from_string(value.to_string()).map_err(D::Error::custom)?;
        Ok(Self { name, json })
    }
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Option<CachedPodSpec>,
            #[serde(default)]
            status: Option<CachedPodStatus>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let mut pod = CachedPod {
            metadata: wire.metadata,
            spec: wire.spec,
            status: wire.status,
        };
        pod.make_lean();
        Ok(pod)
    }
}

impl CachedPod {
    /// Drops managedFields (often the largest part of a pod) and cuts every list to its
    /// length: a decoded list of three has room for four, for every pod of the node.
    fn make_lean(&mut self) {
        self.metadata.managed_fields = None;
        shrink(&mut self.metadata.owner_references);
        shrink(&mut self.metadata.finalizers);
        if let Some(spec) = self.spec.as_mut() {
            spec.containers.shrink_to_fit();
            shrink(&mut spec.init_containers);
            shrink(&mut spec.ephemeral_containers);
        }
        if let Some(status) = self.status.as_mut() {
            shrink(&mut status.conditions);
            shrink(&mut status.container_statuses);
            shrink(&mut status.init_container_statuses);
        }
    }
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    deserializer: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `kube::Resource` for a lean pod type (a struct with a `metadata: ObjectMeta` field, decoded
/// from the API's pods): kube-rs's watcher and reflector take it as they take `Pod`.
macro_rules! lean_pod_resource {
    ($lean:ty) => {
        impl ::kube::Resource for $lean {
            type DynamicType = ();
            type Scope = ::k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                "Pod".into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                "pods".into()
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use lean_pod_resource;

lean_pod_resource!(CachedPod);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, Pod};
    use serde_json::json;

    fn kubelet_pod() -> serde_json::Value {
        let status = |name: &str| {
            json!({"name": name, "image": "img", "imageID": "sha256:1",
                "containerID": format!("containerd://{name}"), "ready": true, "restartCount": 2,
                "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                "lastState": {}, "allocatedResources": {"cpu": "100m"},
                "resources": {"limits": {"cpu": "100m"}},
                "volumeMounts": [{"name": "v", "mountPath": "/v"}]})
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "labels": {"app": "a"}, "annotations": {"k": "v"},
                "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                    "name": "c", "uid": "o-1", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
            "spec": {
                "nodeName": "n1", "volumes": [{"name": "v", "emptyDir": {}}],
                "tolerations": [{"operator": "Exists"}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [
                    {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                     "resources": {"requests": {"cpu": "100m"}}, "fieldFromTheFuture": 3},
                    {"name": "side", "image": "busybox", "command": ["sleep", "1d"]}
                ],
                "ephemeralContainers": [{"name": "debug", "image": "busybox"}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.1", "hostIP": "192.0.2.1",
                "podIPs": [{"ip": "10.0.0.1"}], "startTime": "2026-01-01T00:00:00Z",
                "resize": "InProgress",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:05Z"}],
                "initContainerStatuses": [status("init")],
                "containerStatuses": [status("app"), status("side")]
            }
        })
    }

    #[test]
    fn keeps_what_the_agent_reads_and_drops_the_rest() {
        let pod: CachedPod = serde_json::from_value(kubelet_pod()).expect("decodes");
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(
            pod.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        let spec = pod.spec.as_ref().expect("spec");
        let names: Vec<&str> = spec.containers.iter().map(CachedContainer::name).collect();
        assert_eq!(names, ["app", "side"]);
        assert_eq!(
            spec.init_containers.as_ref().map(|c| c[0].name()),
            Some("init")
        );
        assert_eq!(
            spec.ephemeral_containers.as_ref().map(|c| c[0].name()),
            Some("debug")
        );
        let status = pod.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(status.resize.as_deref(), Some("InProgress"));
        let app = &status.container_statuses.as_ref().expect("statuses")[0];
        assert_eq!(app.container_id.as_deref(), Some("containerd://app"));
        assert!(app.ready);
        assert_eq!(app.restart_count, 2);
        assert!(app.resources.is_some());

        // What is served back (the resize controller reads the pod as JSON) holds nothing else.
        let back = serde_json::to_value(&pod).expect("serializes");
        assert!(back.pointer("/spec/volumes").is_none());
        assert!(back.pointer("/status/hostIP").is_none());
        assert_eq!(
            back.pointer("/status/containerStatuses/0/state"),
            Some(&json!({"running": {}})),
            "whether it runs, not since when"
        );
        assert!(app.state.as_ref().is_some_and(|s| s.running.is_some()));
        assert_eq!(
            back.pointer("/status/conditions/0/type"),
            Some(&json!("Ready"))
        );
        // Lists are exactly sized.
        assert_eq!(spec.containers.capacity(), spec.containers.len());
        let statuses = status.container_statuses.as_ref().expect("statuses");
        assert_eq!(statuses.capacity(), statuses.len());
    }

    #[test]
    fn a_container_spec_is_the_apis_json() {
        let pod: CachedPod = serde_json::from_value(kubelet_pod()).expect("decodes");
        let app = &pod.spec.as_ref().expect("spec").containers[0];
        let served: serde_json::Value = serde_json::from_str(app.json()).expect("json");
        assert_eq!(served, kubelet_pod()["spec"]["containers"][0]);
        // Including a field k8s-openapi does not know, which a newer kubelet hashes.
        assert_eq!(served["fieldFromTheFuture"], json!(3));
        let typed: Container = app.decode().expect("typed");
        assert_eq!(typed.name, "app");
        assert_eq!(typed.env.as_ref().map(Vec::len), Some(1));
        // The same spec decoded twice compares equal; a changed one does not.
        let again: CachedPod = serde_json::from_value(kubelet_pod()).expect("decodes");
        assert_eq!(again.spec.as_ref().expect("spec").containers[0], *app);
        assert_ne!(pod.spec.as_ref().expect("spec").containers[1], *app);
    }

    #[test]
    fn decodes_what_the_full_pod_type_decodes() {
        let full: Pod = serde_json::from_value(kubelet_pod()).expect("full");
        let lean: CachedPod = serde_json::from_value(kubelet_pod()).expect("lean");
        let full_spec = full.spec.expect("spec");
        for (lean, full) in lean
            .spec
            .expect("spec")
            .containers
            .iter()
            .zip(&full_spec.containers)
        {
            assert_eq!(lean.decode::<Container>().expect("typed"), *full);
        }
        assert_eq!(
            lean.status.expect("status").conditions,
            full.status.expect("status").conditions
        );
    }

    #[test]
    fn malformed_containers_are_errors_not_panics() {
        for bad in [
            json!({"spec": {"containers": ["nginx"]}}),
            json!({"spec": {"containers": [{"image": "nginx"}]}}),
            json!({"spec": {"containers": [{"name": 7}]}}),
        ] {
            let err = serde_json::from_value::<CachedPod>(bad.clone());
            assert!(err.is_err(), "{bad}");
        }
        // Nulls are read as absent, as Go reads them.
        let pod: CachedPod = serde_json::from_value(json!({
            "spec": {"containers": null, "initContainers": null},
            "status": {"containerStatuses": [{"name": "a", "ready": null, "restartCount": null}]}
        }))
        .expect("nulls");
        assert!(pod.spec.expect("spec").containers.is_empty());
    }

    #[test]
    fn a_watch_event_decodes_with_its_object_before_its_type() {
        let object = kubelet_pod();
        let text = format!(r#"{{"object":{object},"type":"ADDED"}}"#);
        let event: ::kube::api::WatchEvent<CachedPod> =
            serde_json::from_str(&text).expect("object first");
        assert!(
            matches!(event, ::kube::api::WatchEvent::Added(p) if p.metadata.uid.as_deref() == Some("u-1"))
        );
    }
}
