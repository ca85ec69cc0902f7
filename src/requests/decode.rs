//! What the request controllers read of a request object (a ContainerRecreateRequest, a
//! ContainerResizeRequest): one decoder for every kind. Identity comes from the metadata the
//! watch already decoded; the spec is decoded and checked on its own, so that a malformed request
//! is reported on its own status instead of failing the watch for every other one; the status is
//! read leniently (what cannot be read counts as none written yet).

use std::collections::BTreeMap;

use ::kube::api::DynamicObject;
use k8s_openapi::jiff::Timestamp;
use serde::de::DeserializeOwned;

/// A request's metadata, as the controllers use it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestMeta {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The version decided from: a status write conditioned on it cannot undo a newer one.
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub created_at: Option<Timestamp>,
    pub deleting: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A request object without identity: it cannot even be reported on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("no metadata.{0}")]
pub struct NoIdentity(pub &'static str);

/// Why a request's spec cannot be used; written on the request's status.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("the request has no spec")]
    Missing,
    /// Not of the kind's schema (the decoder's words).
    #[error("invalid spec: {0}")]
    Malformed(String),
    /// Well-formed, but refused by the kind's own checks (their words).
    #[error("{0}")]
    Refused(String),
}

/// A decoded request: `spec` keeps why it cannot be used, to be written on its status.
pub struct Decoded<S, T> {
    pub meta: RequestMeta,
    pub spec: Result<S, SpecError>,
    pub status: T,
}

/// Decodes `object`. Only identity (namespace, name, UID) is required; the spec is decoded and
/// then checked by `validate` (its refusal's words are the kind's own).
pub fn decode<S, T>(
    object: &DynamicObject,
    validate: impl FnOnce(S) -> Result<S, String>,
) -> Result<Decoded<S, T>, NoIdentity>
where
    S: DeserializeOwned,
    T: DeserializeOwned + Default,
{
    let m = &object.metadata;
    let name = m.name.clone().ok_or(NoIdentity("name"))?;
    let namespace = m.namespace.clone().ok_or(NoIdentity("namespace"))?;
    let uid = m.uid.clone().ok_or(NoIdentity("uid"))?;
    let spec = match object.data.get("spec") {
        None => Err(SpecError::Missing),
        Some(spec) => S::deserialize(spec)
            .map_err(|e| SpecError::Malformed(e.to_string()))
            .and_then(|spec| validate(spec).map_err(SpecError::Refused)),
    };
    let status = object
        .data
        .get("status")
        .and_then(|s| T::deserialize(s).ok())
        .unwrap_or_default();
    Ok(Decoded {
        meta: RequestMeta {
            namespace,
            name,
            uid,
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            created_at: m.creation_timestamp.as_ref().map(|t| t.0),
            deleting: m.deletion_timestamp.is_some(),
            labels: m.labels.clone().unwrap_or_default(),
            annotations: m.annotations.clone().unwrap_or_default(),
        },
        spec,
        status,
    })
}

/// Requests are handled one pod at a time, grouped by this key: the request's namespace and
/// the pod its spec names. A request whose spec cannot be read names no pod: it gets a group of
/// its own (a name no pod can have), and is decided alone.
pub(crate) fn pod_group<S>(
    namespace: &str,
    uid: &str,
    spec: &Result<S, SpecError>,
    pod_name: impl FnOnce(&S) -> &str,
) -> (String, String) {
    let pod = match spec {
        Ok(spec) => pod_name(spec).to_owned(),
        Err(_) => format!("\0invalid/{uid}"),
    };
    (namespace.to_owned(), pod)
}

/// A request object from JSON, as tests write them.
#[cfg(test)]
pub(crate) fn object_from_json(json: serde_json::Value) -> Result<DynamicObject, String> {
    serde_json::from_value(json).map_err(|e| format!("not an API object: {e}"))
}

/// The status schema of a CRD manifest (its first version), for tests.
#[cfg(test)]
pub(crate) fn crd_status_schema(crd: &str) -> serde_yaml_ng::Value {
    let crd: serde_yaml_ng::Value = serde_yaml_ng::from_str(crd).expect("the CRD parses");
    let status =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone();
    assert!(status.get("properties").is_some(), "{status:?}");
    status
}

/// Where `value` breaks the CRD's structural schema: a field the real API server would
/// prune (then the agent's "already written" comparison never holds and it writes on every
/// pass) or a value it would refuse (an enum, a type).
#[cfg(test)]
pub(crate) fn schema_violations(
    value: &serde_json::Value,
    schema: &serde_yaml_ng::Value,
    path: &str,
) -> Vec<String> {
    use serde_json::Value;
    let field = |name: &str| schema.get(name);
    let mut out = Vec::new();
    if field("x-kubernetes-int-or-string").and_then(serde_yaml_ng::Value::as_bool) == Some(true) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            out.push(format!("{path}: {value} is not an integer or string"));
        }
        return out;
    }
    match (field("type").and_then(serde_yaml_ng::Value::as_str), value) {
        (Some("object"), Value::Object(map)) => {
            let properties = field("properties");
            // A map (`additionalProperties`): every key's value has the one schema.
            let any_key = field("additionalProperties").filter(|a| a.is_mapping());
            for (key, inner) in map {
                match properties.and_then(|p| p.get(key.as_str())).or(any_key) {
                    Some(inner_schema) => out.extend(schema_violations(
                        inner,
                        inner_schema,
                        &format!("{path}.{key}"),
                    )),
                    None => out.push(format!("{path}.{key}: not in the schema (pruned)")),
                }
            }
        }
        (Some("array"), Value::Array(items)) => {
            if let Some(item_schema) = field("items") {
                for (i, item) in items.iter().enumerate() {
                    out.extend(schema_violations(
                        item,
                        item_schema,
                        &format!("{path}[{i}]"),
                    ));
                }
            }
        }
        (Some("string"), Value::String(text)) => {
            if let Some(allowed) = field("enum").and_then(serde_yaml_ng::Value::as_sequence)
                && !allowed.iter().any(|a| a.as_str() == Some(text))
            {
                out.push(format!("{path}: {text:?} is not one of the enum"));
            }
        }
        (Some("integer"), v) if v.is_i64() || v.is_u64() => {}
        (kind, v) => out.push(format!("{path}: {v} is not of type {kind:?}")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        pod_name: String,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    struct Status {
        phase: String,
    }

    fn decoded(object: serde_json::Value) -> Result<Decoded<Spec, Status>, String> {
        let nonempty = |s: Spec| {
            if s.pod_name.is_empty() {
                Err("spec.podName is empty".to_string())
            } else {
                Ok(s)
            }
        };
        decode(&object_from_json(object)?, nonempty).map_err(|e| e.to_string())
    }

    #[test]
    fn identity_is_required_and_the_rest_is_kept() {
        let request = decoded(json!({
            "metadata": {"name": "r", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "generation": 2, "creationTimestamp": "2026-11-22T06:00:00Z",
                         "deletionTimestamp": "2026-11-22T06:01:00Z",
                         "labels": {"a": "1"}, "annotations": {"b": "2"}},
            "spec": {"podName": "web-0"},
            "status": {"phase": "Pending"},
        }))
        .unwrap();
        assert_eq!(request.meta.uid, "u1");
        assert_eq!(request.meta.resource_version.as_deref(), Some("7"));
        assert_eq!(request.meta.generation, Some(2));
        assert_eq!(
            request.meta.created_at,
            Some("2026-11-22T06:00:00Z".parse().unwrap())
        );
        assert!(request.meta.deleting);
        assert_eq!(request.meta.labels["a"], "1");
        assert_eq!(request.meta.annotations["b"], "2");
        assert_eq!(request.spec.as_ref().unwrap().pod_name, "web-0");
        assert_eq!(request.status.phase, "Pending");
        for missing in ["name", "namespace", "uid"] {
            let mut meta = json!({"name": "r", "namespace": "ns", "uid": "u1"});
            meta.as_object_mut().unwrap().remove(missing);
            let err = decoded(json!({"metadata": meta, "spec": {"podName": "p"}}))
                .err()
                .unwrap();
            assert_eq!(err, format!("no metadata.{missing}"));
        }
    }

    #[test]
    fn a_bad_spec_is_kept_as_its_error_and_a_bad_status_reads_as_none() {
        let meta = json!({"name": "r", "namespace": "ns", "uid": "u1"});
        let no_spec = decoded(json!({"metadata": meta})).unwrap();
        assert_eq!(no_spec.spec.unwrap_err(), SpecError::Missing);
        let wrong = decoded(json!({"metadata": meta, "spec": {"podName": 3}})).unwrap();
        let malformed = wrong.spec.unwrap_err();
        assert!(
            matches!(malformed, SpecError::Malformed(_)),
            "{malformed:?}"
        );
        assert!(malformed.to_string().starts_with("invalid spec: "));
        let empty = decoded(json!({"metadata": meta, "spec": {"podName": ""}})).unwrap();
        assert_eq!(
            empty.spec.unwrap_err(),
            SpecError::Refused("spec.podName is empty".into())
        );
        let odd_status = decoded(json!({"metadata": meta, "spec": {"podName": "p"},
                                        "status": {"phase": 1}}))
        .unwrap();
        assert_eq!(odd_status.status, Status::default());
    }

    #[test]
    fn a_request_without_a_readable_spec_is_grouped_alone() {
        let named = Ok::<_, SpecError>(Spec {
            pod_name: "web-0".into(),
        });
        assert_eq!(
            pod_group("ns", "a", &named, |s| &s.pod_name),
            ("ns".to_string(), "web-0".to_string())
        );
        let bad = Err::<Spec, _>(SpecError::Malformed("expected a string".into()));
        let (a, b) = (
            pod_group("ns", "a", &bad, |s| &s.pod_name),
            pod_group("ns", "b", &bad, |s| &s.pod_name),
        );
        assert_ne!(a, b, "two unreadable requests are never one group");
        assert_ne!(a.1, "web-0");
    }
}
