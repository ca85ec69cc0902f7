//! The three patch types inplaced sends: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386) and strategic merge patch for built-in types. Server-side apply is refused.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::resources::{ResourceDef, SmpSchema};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
}

impl PatchType {
    /// From the request's Content-Type; parameters such as `; charset=utf-8` are ignored.
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Apply `patch` to `current` and return the patched document.
pub fn apply(
    def: &ResourceDef,
    kind: PatchType,
    current: &Value,
    patch: &Value,
) -> ApiResult<Value> {
    let mut doc = current.clone();
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, patch);
        }
        PatchType::Strategic => {
            if def.smp == SmpSchema::Unsupported {
                return Err(ApiError::unsupported_media_type(
                    "application/strategic-merge-patch+json (not supported for custom resources)",
                ));
            }
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            };
            let schema = Schema(def.smp);
            doc = merge_map(&schema, "", &doc, p)?;
        }
    }
    Ok(doc)
}

/// How a list at a path merges.
enum ListStrategy {
    Replace,
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    MergeScalars,
}

struct Schema(SmpSchema);

impl Schema {
    /// Paths use `.field` for map keys and `[]` for list elements, e.g. `.spec.containers[].env`.
    fn list(&self, path: &str) -> ListStrategy {
        use ListStrategy::*;
        let common = match path {
            ".metadata.finalizers" => return MergeScalars,
            ".metadata.ownerReferences" => return MergeByKey("uid"),
            _ => None::<ListStrategy>,
        };
        if let Some(s) = common {
            return s;
        }
        let containers = |p: &str| {
            [
                ".spec.containers[]",
                ".spec.initContainers[]",
                ".spec.ephemeralContainers[]",
            ]
            .iter()
            .find_map(|pre| p.strip_prefix(pre).map(str::to_owned))
        };
        match self.0 {
            SmpSchema::Pod => match path {
                ".spec.containers" | ".spec.initContainers" | ".spec.ephemeralContainers" => {
                    MergeByKey("name")
                }
                ".spec.volumes" | ".spec.imagePullSecrets" | ".spec.resourceClaims" => {
                    MergeByKey("name")
                }
                ".spec.hostAliases" => MergeByKey("ip"),
                ".spec.topologySpreadConstraints" => MergeByKey("topologyKey"),
                ".status.conditions" => MergeByKey("type"),
                ".status.podIPs" => MergeByKey("ip"),
                ".status.resourceClaimStatuses" => MergeByKey("name"),
                p => match containers(p).as_deref() {
                    Some(".env") => MergeByKey("name"),
                    Some(".ports") => MergeByKey("containerPort"),
                    Some(".volumeMounts") => MergeByKey("mountPath"),
                    Some(".volumeDevices") => MergeByKey("devicePath"),
                    _ => Replace,
                },
            },
            SmpSchema::Node => match path {
                ".status.conditions" | ".status.addresses" => MergeByKey("type"),
                ".spec.podCIDRs" => MergeScalars,
                _ => Replace,
            },
            SmpSchema::Event | SmpSchema::Unsupported => Replace,
        }
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

fn merge_map(
    schema: &Schema,
    path: &str,
    current: &Value,
    patch: &Map<String, Value>,
) -> ApiResult<Value> {
    match directive(&Value::Object(patch.clone())) {
        Some("replace") => {
            let mut p = patch.clone();
            p.remove("$patch");
            return strip_directives(&Value::Object(p));
        }
        Some("delete") => return Ok(Value::Null),
        Some("merge") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive {other:?}"
            )));
        }
    }
    let mut out = match current {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let mut orders: Vec<(String, Vec<Value>)> = vec![];
    for (key, pv) in patch {
        if key == "$patch" || key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            if let Value::Array(a) = pv {
                orders.push((field.to_owned(), a.clone()));
            }
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(cur)), Value::Array(del)) = (out.get(field), pv) {
                let kept: Vec<Value> = cur.iter().filter(|v| !del.contains(v)).cloned().collect();
                out.insert(field.to_owned(), Value::Array(kept));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "unsupported patch directive {key:?}"
            )));
        }
        let child = format!("{path}.{key}");
        match pv {
            Value::Null => {
                out.remove(key);
            }
            Value::Object(pm) => {
                let cur = out.get(key).cloned().unwrap_or(Value::Null);
                let merged = merge_map(schema, &child, &cur, pm)?;
                if merged.is_null() {
                    out.remove(key);
                } else {
                    out.insert(key.clone(), merged);
                }
            }
            Value::Array(pa) => {
                let cur = out
                    .get(key)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                out.insert(key.clone(), merge_list(schema, &child, &cur, pa)?);
            }
            scalar => {
                out.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        if let Some(Value::Array(list)) = out.get(&field) {
            let key = match schema.list(&format!("{path}.{field}")) {
                ListStrategy::MergeByKey(k) => Some(k),
                _ => None,
            };
            out.insert(field, Value::Array(reorder(list, &order, key)));
        }
    }
    Ok(Value::Object(out))
}

/// Put elements named in `order` first, in that order; others keep their relative place after.
fn reorder(list: &[Value], order: &[Value], key: Option<&str>) -> Vec<Value> {
    let id = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let order_ids: Vec<Value> = order.iter().map(&id).collect();
    let mut out: Vec<Value> = order_ids
        .iter()
        .filter_map(|oid| list.iter().find(|v| id(v) == *oid).cloned())
        .collect();
    out.extend(list.iter().filter(|v| !order_ids.contains(&id(v))).cloned());
    out
}

fn merge_list(schema: &Schema, path: &str, current: &[Value], patch: &[Value]) -> ApiResult<Value> {
    // A `{"$patch": "replace"}` element replaces the whole list with the other elements.
    if patch.iter().any(|e| directive(e) == Some("replace")) {
        let rest: Vec<Value> = patch
            .iter()
            .filter(|e| directive(e) != Some("replace"))
            .cloned()
            .collect();
        return strip_directives(&Value::Array(rest));
    }
    match schema.list(path) {
        ListStrategy::Replace => strip_directives(&Value::Array(patch.to_vec())),
        ListStrategy::MergeScalars => {
            let mut out = current.to_vec();
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeByKey(key) => {
            let mut out = current.to_vec();
            let elem_path = format!("{path}[]");
            for pe in patch {
                let Value::Object(pm) = pe else {
                    return Err(ApiError::bad_request(format!(
                        "strategic merge patch: element of {path} must be an object"
                    )));
                };
                let Some(kv) = pm.get(key) else {
                    return Err(ApiError::bad_request(format!(
                        "map: {pe} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|c| c.get(key) == Some(kv));
                match (directive(pe), pos) {
                    (Some("delete"), Some(i)) => {
                        out.remove(i);
                    }
                    (Some("delete"), None) => {}
                    (_, Some(i)) => {
                        let merged = merge_map(schema, &elem_path, &out[i], pm)?;
                        out[i] = merged;
                    }
                    (_, None) => out.push(strip_directives(pe)?),
                }
            }
            Ok(Value::Array(out))
        }
    }
}

/// New content taken from a patch must not carry `$` directives into the stored object.
fn strip_directives(v: &Value) -> ApiResult<Value> {
    Ok(match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| Ok((k.clone(), strip_directives(v)?)))
                .collect::<ApiResult<Map<String, Value>>>()?,
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect::<ApiResult<_>>()?),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::default_resources;
    use serde_json::json;

    fn smp(cur: Value, p: Value) -> Value {
        let defs = default_resources();
        apply(&defs[0], PatchType::Strategic, &cur, &p).unwrap()
    }

    #[test]
    fn containers_merge_by_name() {
        let cur = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
            {"name": "b", "image": "y"}]}});
        let out = smp(
            cur.clone(),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "x");
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(out["spec"]["containers"][1]["name"], "b");
        let out = smp(
            cur.clone(),
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}),
        );
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        let out = smp(
            cur,
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "z"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "c", "image": "z"}])
        );
    }

    #[test]
    fn status_lists_and_directives() {
        let cur = json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                       "containerStatuses": [{"name": "a"}, {"name": "b"}]}});
        let out = smp(
            cur,
            json!({"metadata": {"finalizers": ["b"], "labels": {"x": null}},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "True"}],
                              "containerStatuses": [{"name": "a", "ready": true}],
                              "$setElementOrder/conditions": [{"type": "Other"}, {"type": "Ready"}]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(out["status"]["conditions"][0]["type"], "Other");
        assert_eq!(out["status"]["conditions"][1]["status"], "True");
        // containerStatuses is atomic in the real API: replaced whole.
        assert_eq!(
            out["status"]["containerStatuses"],
            json!([{"name": "a", "ready": true}])
        );
    }

    #[test]
    fn map_replace_directive() {
        let out = smp(
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "replace", "b": "2"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
    }
}
