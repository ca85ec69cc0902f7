//! What each endpoint may change: the main resource, `/status`, and `pods/resize` (or the
//! pod update that resizes before 1.32, per [`crate::PodResizeApi`]), plus the few pod
//! validations that decide whether inplaced's requests would pass.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::{PodResizeApi, ResourceDef, SmpSchema};
use crate::util::{self, finalizers, get_path, name_of};

/// The endpoint a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Main,
    Status,
    Resize,
}

impl Endpoint {
    pub fn from_subresource(sub: Option<&str>) -> Option<Self> {
        match sub {
            None => Some(Endpoint::Main),
            Some("status") => Some(Endpoint::Status),
            Some("resize") => Some(Endpoint::Resize),
            Some(_) => None,
        }
    }
}

fn set_or_remove(obj: &mut Value, key: &str, v: Option<&Value>) {
    if let Some(o) = obj.as_object_mut() {
        match v {
            Some(v) => {
                o.insert(key.to_owned(), v.clone());
            }
            None => {
                o.remove(key);
            }
        }
    }
}

/// Reset what a create may not set. Pods start Pending with their QoS class, like the
/// real pod strategy; a CRD with a status subresource drops status on create.
pub fn prepare_create(def: &ResourceDef, obj: &mut Value) {
    if def.smp == SmpSchema::Pod {
        let qos = qos_class(obj);
        set_or_remove(
            obj,
            "status",
            Some(&json!({"phase": "Pending", "qosClass": qos})),
        );
    } else if def.custom && def.status_subresource {
        set_or_remove(obj, "status", None);
    }
}

/// What the apiextensions server's controllers write into a new CRD's status at once (names
/// accepted, established, the stored version): the double has no such controllers, and a
/// client waiting for `Established` must see it.
pub fn establish_crd(crd: &mut Value) {
    let names = get_path(crd, "spec.names").cloned().unwrap_or(json!({}));
    let stored: Vec<Value> = get_path(crd, "spec.versions")
        .and_then(Value::as_array)
        .map(|versions| {
            versions
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let now = util::now_rfc3339();
    let condition = |kind: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": "True", "lastTransitionTime": now,
               "reason": reason, "message": message})
    };
    let status = json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    });
    set_or_remove(crd, "status", Some(&status));
}

/// Turn the client's proposed object into the object to store, per endpoint.
pub fn prepare_update(
    def: &ResourceDef,
    ep: Endpoint,
    old: &Value,
    new: Value,
) -> ApiResult<Value> {
    match ep {
        Endpoint::Main => {
            let mut new = new;
            if def.status_subresource {
                set_or_remove(&mut new, "status", old.get("status"));
            }
            if def.smp == SmpSchema::Pod {
                if def.pod_resize.update_may_resize() {
                    // Resources change as through a resize, everything else as in any update.
                    let resized = with_new_resources(def, old, &new, Endpoint::Main)?;
                    check_pod_spec_update(def, &resized, &new)?;
                } else {
                    check_pod_spec_update(def, old, &new)?;
                }
                mark_resize_proposed(def, old, &mut new);
            }
            Ok(new)
        }
        Endpoint::Status if def.custom => {
            // A custom resource's status endpoint changes nothing but status.
            let mut out = old.clone();
            set_or_remove(&mut out, "status", new.get("status"));
            Ok(out)
        }
        Endpoint::Status => {
            // Built-in status endpoints keep spec and owner references; other metadata
            // (labels, annotations) may change, as with pods/status on the real server.
            let mut out = new;
            set_or_remove(&mut out, "spec", old.get("spec"));
            if def.smp == SmpSchema::Pod && def.pod_resize == PodResizeApi::Off {
                drop_resize_status_fields(old, &mut out);
            }
            let owners = get_path(old, "metadata.ownerReferences").cloned();
            if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
                match owners {
                    Some(o) => m.insert("ownerReferences".into(), o),
                    None => m.remove("ownerReferences"),
                };
            }
            Ok(out)
        }
        Endpoint::Resize => {
            check_node_supports_resize(def, old)?;
            let mut out = with_new_resources(def, old, &new, Endpoint::Resize)?;
            mark_resize_proposed(def, old, &mut out);
            Ok(out)
        }
    }
}

/// Without the InPlacePodVerticalScaling gate the server drops the containers' `resources` and
/// `allocatedResources` from a status write, unless the stored pod's spec already uses the
/// feature (a container or init container with a `resizePolicy`), as `dropDisabledPodStatusFields`
/// does. So a kubelet that resizes and reports them is not seen to, through such a server.
fn drop_resize_status_fields(old: &Value, new: &mut Value) {
    let in_use = ["spec.containers", "spec.initContainers"]
        .iter()
        .any(|list| {
            get_path(old, list)
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.get("resizePolicy")
                            .is_some_and(|p| p.as_array().is_some_and(|p| !p.is_empty()))
                    })
                })
        });
    if in_use {
        return;
    }
    let Some(status) = new.get_mut("status") else {
        return;
    };
    for list in [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ] {
        let Some(statuses) = status.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in statuses.iter_mut().filter_map(Value::as_object_mut) {
            container.remove("resources");
            container.remove("allocatedResources");
        }
    }
}

/// `ValidatePodResize`'s version-skew check (1.32+): the first running container's status
/// must carry `resources`, which only a kubelet that resizes in place writes. Without a
/// running container the server cannot tell, and lets the resize through.
fn check_node_supports_resize(def: &ResourceDef, pod: &Value) -> ApiResult<()> {
    let statuses = get_path(pod, "status.containerStatuses")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let first_running = statuses
        .iter()
        .find(|s| get_path(s, "state.running").is_some());
    match first_running {
        Some(status) if status.get("resources").is_none_or(Value::is_null) => {
            Err(ApiError::invalid(
                def,
                name_of(pod),
                "spec",
                "Forbidden: Pod running on node without support for resize",
            ))
        }
        _ => Ok(()),
    }
}

/// Checks common to every endpoint once the stored object is known.
pub fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> ApiResult<()> {
    if get_path(old, "metadata.deletionTimestamp").is_some() {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                def,
                name_of(old),
                "metadata.finalizers",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            ));
        }
    }
    Ok(())
}

/// Fields of a pod spec that an update of the main resource may change. Resources are
/// not among them since in-place resize moved to the `resize` subresource.
fn blank_mutable_pod_fields(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(o) = s.as_object_mut() {
        for k in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
        ] {
            o.remove(k);
        }
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = o.get_mut(list) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
    }
    s
}

fn check_pod_spec_update(def: &ResourceDef, old: &Value, new: &Value) -> ApiResult<()> {
    let empty = Value::Object(Map::new());
    let o = blank_mutable_pod_fields(old.get("spec").unwrap_or(&empty));
    let n = blank_mutable_pod_fields(new.get("spec").unwrap_or(&empty));
    if o != n {
        return Err(ApiError::invalid(
            def,
            name_of(old),
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,\
             `spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` \
             (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` \
             (allow it to be set to 1 if it was previously negative)",
        ));
    }
    Ok(())
}

/// `old` with the container resources of `new`, checked as the real server checks a resize
/// (only cpu and memory change, the QoS class stays). Through `pods/resize` also
/// `resizePolicy` and restartable init containers; through a pod update (1.27–1.31) only the
/// resources of regular containers.
fn with_new_resources(
    def: &ResourceDef,
    old: &Value,
    new: &Value,
    via: Endpoint,
) -> ApiResult<Value> {
    let subresource = via == Endpoint::Resize;
    let lists: &[&str] = if subresource {
        &["containers", "initContainers"]
    } else {
        &["containers"]
    };
    let mut out = old.clone();
    for &list in lists {
        let Some(new_cs) = get_path(new, &format!("spec.{list}")).and_then(Value::as_array) else {
            continue;
        };
        let old_cs = get_path(old, &format!("spec.{list}"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        // A strategic merge appends a container of an unknown name: the container list changes,
        // which the server's resize validation refuses.
        if let Some(unknown) = new_cs
            .iter()
            .find(|n| !old_cs.iter().any(|c| c.get("name") == n.get("name")))
        {
            return Err(ApiError::invalid(
                def,
                name_of(old),
                &format!("spec.{list}"),
                &format!(
                    "Forbidden: pod updates may not add or remove containers (no container {})",
                    unknown.get("name").unwrap_or(&Value::Null)
                ),
            ));
        }
        let Some(Value::Array(cs)) = out.get_mut("spec").and_then(|s| s.get_mut(list)) else {
            continue;
        };
        for c in cs.iter_mut() {
            let Some(nc) = new_cs.iter().find(|n| n.get("name") == c.get("name")) else {
                continue;
            };
            if list == "initContainers"
                && c.get("restartPolicy").and_then(Value::as_str) != Some("Always")
            {
                if c.get("resources") != nc.get("resources") {
                    return Err(ApiError::invalid(
                        def,
                        name_of(old),
                        "spec.initContainers[*].resources",
                        "Forbidden: resources for non-sidecar init containers are immutable",
                    ));
                }
                continue;
            }
            set_or_remove(c, "resources", nc.get("resources"));
            if subresource {
                set_or_remove(c, "resizePolicy", nc.get("resizePolicy"));
            }
            check_resize_resources(def, old, c, nc)?;
        }
    }
    let (before, after) = (qos_class(old), qos_class(&out));
    if before != after {
        return Err(ApiError::invalid(
            def,
            name_of(old),
            "spec",
            &format!(
                "Invalid value: \"{after}\": Pod QOS Class may not change as a result of resizing"
            ),
        ));
    }
    Ok(out)
}

/// Until 1.32 the server marks a resize `status.resize: Proposed` for the kubelet to act on:
/// when a container's resources changed and its status does not already report the new
/// requests as allocated.
fn mark_resize_proposed(def: &ResourceDef, old: &Value, new: &mut Value) {
    if !def.pod_resize.marks_proposed() {
        return;
    }
    let old_resources = |name: Option<&Value>| {
        get_path(old, "spec.containers")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("name") == name))
            .and_then(|c| c.get("resources"))
    };
    let status_of = |name: Option<&Value>| {
        get_path(new, "status.containerStatuses")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("name") == name))
    };
    // As MarkPodProposedForResize: a container with requests whose resources changed, and
    // whose status (it must have one) shows other allocated resources than those requests.
    let proposed = get_path(new, "spec.containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            let name = c.get("name");
            let resources = c.get("resources");
            let Some(requests) = resources.and_then(|r| r.get("requests")) else {
                return false;
            };
            let changed = !same_resources(old_resources(name), resources);
            changed
                && status_of(name)
                    .is_some_and(|s| !same_quantities(s.get("allocatedResources"), Some(requests)))
        });
    if proposed && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
        status.insert("resize".into(), json!("Proposed"));
    }
}

/// Requests and limits equal as quantities (`1` and `1000m` are the same).
fn same_resources(a: Option<&Value>, b: Option<&Value>) -> bool {
    ["requests", "limits"]
        .iter()
        .all(|which| same_quantities(a.and_then(|r| r.get(*which)), b.and_then(|r| r.get(*which))))
}

/// Two resource lists with the same names and equal quantities; absent equals empty.
fn same_quantities(a: Option<&Value>, b: Option<&Value>) -> bool {
    let parse = |list: Option<&Value>| -> Vec<(String, Option<i128>)> {
        let mut out: Vec<(String, Option<i128>)> = list
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let text = match v {
                    Value::Number(n) => Some(n.to_string()),
                    other => other.as_str().map(str::to_owned),
                };
                (k.clone(), text.as_deref().and_then(parse_quantity))
            })
            .collect();
        out.sort();
        out
    };
    parse(a) == parse(b)
}

fn check_resize_resources(
    def: &ResourceDef,
    pod: &Value,
    old_c: &Value,
    new_c: &Value,
) -> ApiResult<()> {
    let strip = |c: &Value, which: &str| -> Value {
        let mut m = get_path(c, &format!("resources.{which}"))
            .cloned()
            .unwrap_or(json!({}));
        if let Some(o) = m.as_object_mut() {
            o.remove("cpu");
            o.remove("memory");
        }
        m
    };
    // `old_c` already holds the new resources; compare the pod's original container.
    let name = old_c.get("name");
    let orig = ["containers", "initContainers"].iter().find_map(|l| {
        get_path(pod, &format!("spec.{l}"))
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("name") == name))
    });
    let Some(orig) = orig else { return Ok(()) };
    if def.pod_resize.keeps_memory_limits() {
        check_memory_limit_kept(def, pod, orig, new_c)?;
    }
    for which in ["requests", "limits"] {
        if strip(orig, which) != strip(new_c, which) {
            return Err(ApiError::invalid(
                def,
                name_of(pod),
                "spec.containers[*].resources",
                "Forbidden: only cpu and memory resources are mutable",
            ));
        }
    }
    Ok(())
}

/// 1.33's rule: a memory limit that decreases needs the container's memory resize policy to be
/// `RestartContainer` (the message as users report it from 1.33 clusters; the validation code
/// itself was not read here).
fn check_memory_limit_kept(
    def: &ResourceDef,
    pod: &Value,
    orig: &Value,
    new_c: &Value,
) -> ApiResult<()> {
    let limit = |c: &Value| {
        get_path(c, "resources.limits.memory")
            .and_then(Value::as_str)
            .and_then(parse_quantity)
    };
    let decreased = matches!((limit(orig), limit(new_c)), (Some(old), Some(new)) if new < old);
    let restarts = new_c
        .get("resizePolicy")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|p| {
            p.get("resourceName") == Some(&json!("memory"))
                && p.get("restartPolicy") == Some(&json!("RestartContainer"))
        });
    if !decreased || restarts {
        return Ok(());
    }
    let name = orig.get("name");
    let (list, index) = ["containers", "initContainers"]
        .iter()
        .find_map(|l| {
            let i = get_path(pod, &format!("spec.{l}"))
                .and_then(Value::as_array)?
                .iter()
                .position(|c| c.get("name") == name)?;
            Some((*l, i))
        })
        .unwrap_or(("containers", 0));
    Err(ApiError::invalid(
        def,
        name_of(pod),
        &format!("spec.{list}[{index}].resources.limits[memory]"),
        "Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer",
    ))
}

/// kube-apiserver's PodResizeValidator admission (1.36) refuses a resize whose pod would request
/// more cpu or memory than its node's `status.allocatable` (403 Forbidden, as
/// tests/real_kube_double.rs saw). A Node stored without allocatable is left alone here (the
/// real server would count it as 0 and refuse every resize).
pub fn check_node_allocatable(pod: &Value, node: Option<&Value>) -> ApiResult<()> {
    let Some(allocatable) = node.and_then(|n| get_path(n, "status.allocatable")) else {
        return Ok(());
    };
    let requested = |resource: &str| -> i128 {
        let of = |c: &Value| {
            get_path(c, &format!("resources.requests.{resource}"))
                .and_then(Value::as_str)
                .and_then(parse_quantity)
                .unwrap_or(0)
        };
        let list = |path: &str| {
            get_path(pod, path)
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
        };
        let sidecar =
            |c: &&Value| get_path(c, "restartPolicy").and_then(Value::as_str) == Some("Always");
        let running: i128 = list("spec.containers").iter().map(of).sum::<i128>()
            + list("spec.initContainers")
                .iter()
                .filter(sidecar)
                .map(of)
                .sum::<i128>();
        let init = list("spec.initContainers")
            .iter()
            .filter(|c| !sidecar(c))
            .map(of)
            .max()
            .unwrap_or(0);
        running.max(init)
    };
    // cpu in millicores, memory in bytes, rounded up, as the message says them.
    let mut short = Vec::new();
    for (resource, per_unit) in [("cpu", 1_000_000i128), ("memory", 1_000_000_000)] {
        let Some(available) = allocatable
            .get(resource)
            .and_then(Value::as_str)
            .and_then(parse_quantity)
        else {
            continue;
        };
        let wanted = requested(resource);
        if wanted > available {
            let up = |v: i128| (v + per_unit - 1).div_euclid(per_unit);
            short.push(format!(
                "{resource}, requested: {}, allocatable: {}",
                up(wanted),
                up(available)
            ));
        }
    }
    if short.is_empty() {
        return Ok(());
    }
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!(
            "pods \"{}\" is forbidden: node didn't have enough allocatable resources: {}",
            name_of(pod),
            short.join("; ")
        ),
    );
    e.details = Some(json!({"name": name_of(pod), "kind": "pods"}));
    Err(e)
}

/// Parse a resource quantity into nano-units so `1` and `1000m` compare equal.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let neg = int_part.starts_with('-');
    let int_digits = int_part.trim_start_matches(['+', '-']);
    if (int_digits.is_empty() && frac_part.is_empty()) || frac_part.len() > 9 {
        return None;
    }
    let int: i128 = if int_digits.is_empty() {
        0
    } else {
        int_digits.parse().ok()?
    };
    let frac: i128 = if frac_part.is_empty() {
        0
    } else {
        format!("{frac_part:0<9}").parse().ok()?
    };
    let base = int.checked_mul(1_000_000_000)?.checked_add(frac)?;
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: u32 = e[1..].parse().ok()?;
            (10i128.checked_pow(exp)?, 1)
        }
        _ => return None,
    };
    let v = base.checked_mul(mul)? / div;
    Some(if neg { -v } else { v })
}

/// The pod's QoS class from its containers' cpu and memory requests and limits.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| get_path(pod, &format!("spec.{l}")).and_then(Value::as_array))
        .flatten();
    for c in containers {
        for res in ["cpu", "memory"] {
            let req = get_path(c, &format!("resources.requests.{res}")).and_then(Value::as_str);
            let lim = get_path(c, &format!("resources.limits.{res}")).and_then(Value::as_str);
            let nonzero = |q: Option<&str>| q.and_then(parse_quantity).is_some_and(|v| v != 0);
            if nonzero(req) || nonzero(lim) {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                // Requests default to limits when unset.
                (None, Some(_)) => {}
                (Some(r), Some(l)) => {
                    if parse_quantity(r) != parse_quantity(l) {
                        guaranteed = false;
                    }
                }
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1"), parse_quantity("1000m"));
        assert_eq!(parse_quantity("0.5"), parse_quantity("500m"));
        assert_eq!(parse_quantity("1Gi"), parse_quantity("1073741824"));
        assert_eq!(parse_quantity("1e3"), parse_quantity("1k"));
        assert_eq!(parse_quantity("bogus"), None);
    }

    #[test]
    fn qos() {
        let g = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m"}}}]}});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(qos_class(&b), "Burstable");
        let be = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(qos_class(&be), "BestEffort");
    }
}
