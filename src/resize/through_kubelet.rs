//! The `kubelet` actuator: where the node's kubelet resizes in place, the agent asks it through
//! the API — `pods/resize` from 1.32, a pod spec patch on 1.27–1.31 with the
//! InPlacePodVerticalScaling gate — and follows the pod's resize status to the end. kubelet
//! 1.33+ checkpoints what it actuated, so resizing behind its back would be undone.

use std::path::Path;

use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::request::Actuator;
use super::resources;
use crate::hashing::KubeletVersion;
use crate::resources::Resources;

/// How the agent picks an actuator (`resize-actuator` setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ActuatorSetting {
    /// From the kubelet's version and feature gate; `cri` for static pods.
    #[default]
    Auto,
    Kubelet,
    Cri,
}

/// Which API the kubelet resizes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeletResizeApi {
    /// `pods/resize` (1.32+).
    Subresource,
    /// `spec.containers[*].resources` of the pod (1.27–1.31 with the gate).
    PodSpec,
}

/// The actuator for one pod, and for `kubelet` the API to use.
pub fn choose_actuator(
    setting: ActuatorSetting,
    kubelet_version: Option<&str>,
    resize_gate: Option<bool>,
    static_pod: bool,
) -> Result<(Actuator, Option<KubeletResizeApi>), String> {
    // kubelet never resizes static pods: their spec comes from a file, not the API.
    if static_pod || setting == ActuatorSetting::Cri {
        return Ok((Actuator::Cri, None));
    }
    let minor = kubelet_version
        .and_then(|v| KubeletVersion::parse(v).ok())
        .map(|v| v.minor());
    let api = |minor: u32| {
        if minor >= 32 {
            KubeletResizeApi::Subresource
        } else {
            KubeletResizeApi::PodSpec
        }
    };
    // The gate is beta and on by default from 1.33 (GA in 1.35), alpha and off before.
    let kubelet_resizes = minor.is_some_and(|m| m >= 27 && resize_gate.unwrap_or(m >= 33));
    match (setting, minor) {
        (ActuatorSetting::Kubelet, Some(m)) if kubelet_resizes => {
            Ok((Actuator::Kubelet, Some(api(m))))
        }
        (ActuatorSetting::Kubelet, _) => Err(format!(
            "resize-actuator is kubelet, but the kubelet ({}) does not resize in place: it needs 1.27+ with the InPlacePodVerticalScaling gate (on by default from 1.33)",
            kubelet_version.unwrap_or("version unknown")
        )),
        (_, Some(m)) if kubelet_resizes => Ok((Actuator::Kubelet, Some(api(m)))),
        _ => Ok((Actuator::Cri, None)),
    }
}

/// `featureGates.InPlacePodVerticalScaling` from the kubelet's config file, if it says.
pub fn resize_gate_from_kubelet_config(path: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(path).ok()?;
    let config: Value = serde_yaml_ng::from_str(&text).ok()?;
    config
        .get("featureGates")?
        .get("InPlacePodVerticalScaling")?
        .as_bool()
}

/// Asks the API for the new resources of the named containers (strategic merge: only these
/// containers' resources change).
pub async fn request(
    client: &::kube::Client,
    api: KubeletResizeApi,
    namespace: &str,
    pod: &str,
    targets: &[(String, Resources)],
) -> Result<(), ::kube::Error> {
    let containers: Vec<Value> = targets
        .iter()
        .map(|(name, r)| json!({"name": name, "resources": r.to_requirements()}))
        .collect();
    let patch = json!({"spec": {"containers": containers}});
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::default();
    match api {
        KubeletResizeApi::Subresource => {
            pods.patch_subresource("resize", pod, &params, &Patch::Strategic(&patch))
                .await?;
        }
        KubeletResizeApi::PodSpec => {
            pods.patch(pod, &params, &Patch::Strategic(&patch)).await?;
        }
    }
    Ok(())
}

/// Where the kubelet is with a resize, from the pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// The API does not show the new resources yet, or the kubelet is still at it.
    Waiting(String),
    /// The kubelet cannot do it now and retries (the node is full).
    Deferred(String),
    /// The kubelet will not do it on this node.
    Infeasible(String),
    /// Done: what the kubelet reports as applied, per container.
    Done(Vec<(String, Resources)>),
}

pub fn progress(pod: &Value, targets: &[(String, Resources)]) -> Progress {
    for (name, target) in targets {
        let spec = container(pod, "spec", "containers", name)
            .and_then(|c| c.get("resources"))
            .map(Resources::from_requirements);
        match spec {
            Some(Ok(spec)) if spec == *target => {}
            _ => {
                return Progress::Waiting(format!(
                    "the pod's spec does not show the new resources of {name} yet"
                ));
            }
        }
    }
    let conditions = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let condition = |kind: &str| {
        conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    let text = |c: &Value, key: &str| c.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    // 1.33+: conditions.
    if let Some(pending) = condition("PodResizePending") {
        let message = text(pending, "message");
        return match text(pending, "reason").as_str() {
            "Infeasible" => Progress::Infeasible(message),
            _ => Progress::Deferred(message),
        };
    }
    if condition("PodResizeInProgress").is_some() {
        return Progress::Waiting("the kubelet is resizing".into());
    }
    // 1.27–1.32: status.resize.
    match pod.pointer("/status/resize").and_then(Value::as_str) {
        Some("Infeasible") => {
            return Progress::Infeasible("the kubelet reports the resize as Infeasible".into());
        }
        Some("Deferred") => {
            return Progress::Deferred("the kubelet reports the resize as Deferred".into());
        }
        Some(other) if !other.is_empty() => {
            return Progress::Waiting(format!("the kubelet reports the resize as {other}"));
        }
        _ => {}
    }
    let mut applied = Vec::new();
    for (name, target) in targets {
        let status = container(pod, "status", "containerStatuses", name);
        let reported = status
            .and_then(|s| s.get("resources"))
            .map(Resources::from_requirements);
        let expected = as_runtime_reports(target);
        match reported {
            Some(Ok(reported)) if as_runtime_reports(&reported) == expected => {
                applied.push((name.clone(), reported))
            }
            Some(Ok(_)) => {
                return Progress::Waiting(format!(
                    "the pod's status does not show {name} resized yet"
                ));
            }
            // Kubelets before 1.29 report no `resources`: done once nothing is pending.
            None | Some(Err(_)) => applied.push((name.clone(), *target)),
        }
    }
    Progress::Done(applied)
}

/// What survives the trip through the runtime (cpu requests are stored as shares).
fn as_runtime_reports(r: &Resources) -> Resources {
    let mut back = resources::from_cri(&resources::cri_resources(r));
    back.memory_request = r.memory_request;
    if r.cpu_request.is_none() {
        back.cpu_request = None;
    }
    if r.cpu_limit.is_none() {
        back.cpu_limit = None;
    }
    if r.memory_limit.is_none() {
        back.memory_limit = None;
    }
    back
}

fn container<'a>(pod: &'a Value, part: &str, list: &str, name: &str) -> Option<&'a Value> {
    pod.get(part)?
        .get(list)?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpu_milli: i64, mem: i64) -> Resources {
        Resources {
            cpu_request: Some(cpu_milli),
            cpu_limit: Some(cpu_milli),
            memory_request: Some(mem),
            memory_limit: Some(mem),
        }
    }

    #[test]
    fn actuator_follows_the_kubelet_release_and_gate() {
        use ActuatorSetting::*;
        let pick = |s, v: Option<&str>, gate, static_pod| choose_actuator(s, v, gate, static_pod);
        assert_eq!(
            pick(Auto, Some("v1.35.0"), None, false),
            Ok((Actuator::Kubelet, Some(KubeletResizeApi::Subresource)))
        );
        assert_eq!(
            pick(Auto, Some("v1.33.1"), None, false),
            Ok((Actuator::Kubelet, Some(KubeletResizeApi::Subresource)))
        );
        assert_eq!(
            pick(Auto, Some("v1.33.1"), Some(false), false),
            Ok((Actuator::Cri, None))
        );
        assert_eq!(
            pick(Auto, Some("v1.32.2"), None, false),
            Ok((Actuator::Cri, None))
        );
        assert_eq!(
            pick(Auto, Some("v1.32.2"), Some(true), false),
            Ok((Actuator::Kubelet, Some(KubeletResizeApi::Subresource)))
        );
        assert_eq!(
            pick(Auto, Some("v1.30.7"), Some(true), false),
            Ok((Actuator::Kubelet, Some(KubeletResizeApi::PodSpec)))
        );
        assert_eq!(
            pick(Auto, Some("v1.26.3"), Some(true), false),
            Ok((Actuator::Cri, None))
        );
        assert_eq!(pick(Auto, None, None, false), Ok((Actuator::Cri, None)));
        assert_eq!(
            pick(Auto, Some("v1.35.0"), None, true),
            Ok((Actuator::Cri, None))
        );
        assert_eq!(
            pick(Cri, Some("v1.35.0"), None, false),
            Ok((Actuator::Cri, None))
        );
        assert!(pick(Kubelet, Some("v1.26.3"), None, false).is_err_and(|e| e.contains("1.27+")));
        assert_eq!(
            pick(Kubelet, Some("v1.35.0+k3s1"), None, false),
            Ok((Actuator::Kubelet, Some(KubeletResizeApi::Subresource)))
        );
    }

    #[test]
    fn gate_from_the_kubelet_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "kind: KubeletConfiguration\nfeatureGates:\n  InPlacePodVerticalScaling: true\n",
        )
        .expect("write");
        assert_eq!(resize_gate_from_kubelet_config(&path), Some(true));
        std::fs::write(&path, "kind: KubeletConfiguration\n").expect("write");
        assert_eq!(resize_gate_from_kubelet_config(&path), None);
        assert_eq!(
            resize_gate_from_kubelet_config(&dir.path().join("missing")),
            None
        );
    }

    fn pod(spec_cpu: &str, status: Value) -> Value {
        json!({
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": spec_cpu, "memory": "64Mi"}, "limits": {"cpu": spec_cpu, "memory": "64Mi"}}}]},
            "status": status,
        })
    }

    #[test]
    fn progress_through_conditions_and_the_resize_field() {
        let target = vec![("main".to_string(), res(500, 64 << 20))];
        assert!(matches!(
            progress(&pod("250m", json!({})), &target),
            Progress::Waiting(_)
        ));
        let pending = json!({"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "Node didn't have enough capacity"}]});
        assert_eq!(
            progress(&pod("500m", pending), &target),
            Progress::Infeasible("Node didn't have enough capacity".into())
        );
        let deferred = json!({"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": "later"}]});
        assert_eq!(
            progress(&pod("500m", deferred), &target),
            Progress::Deferred("later".into())
        );
        let busy = json!({"conditions": [{"type": "PodResizeInProgress", "status": "True"}]});
        assert!(matches!(
            progress(&pod("500m", busy), &target),
            Progress::Waiting(_)
        ));
        assert!(matches!(
            progress(&pod("500m", json!({"resize": "InProgress"})), &target),
            Progress::Waiting(_)
        ));
        assert!(matches!(
            progress(&pod("500m", json!({"resize": "Infeasible"})), &target),
            Progress::Infeasible(_)
        ));
        let old = json!({"containerStatuses": [{"name": "main", "resources": {
            "requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "250m", "memory": "64Mi"}}}]});
        assert!(matches!(
            progress(&pod("500m", old), &target),
            Progress::Waiting(_)
        ));
        let done = json!({"containerStatuses": [{"name": "main", "resources": {
            "requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}}}]});
        assert_eq!(
            progress(&pod("500m", done), &target),
            Progress::Done(target.clone())
        );
        // No `resources` in the status (kubelet before 1.29): done once nothing is pending.
        assert_eq!(
            progress(
                &pod("500m", json!({"containerStatuses": [{"name": "main"}]})),
                &target
            ),
            Progress::Done(target.clone())
        );
    }
}
