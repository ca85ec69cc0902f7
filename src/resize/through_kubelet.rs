//! The `kubelet` actuator: where the node's kubelet resizes in place (seen in the pod status
//! first, its config file and release second), the agent asks it through the API the API
//! server serves — `pods/resize` where discovery lists it, a pod spec patch otherwise (1.27–1.31
//! with the InPlacePodVerticalScaling gate) — and follows the pod's resize status to the end:
//! conditions from a 1.33+ kubelet, `status.resize` from an older one. kubelet 1.33+
//! checkpoints what it actuated, so resizing behind its back would be undone.

use std::path::Path;

use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::object::Actuator;
use super::resources;
use crate::hashing::KubeletVersion;
use crate::nodeview::{ContainerKind, NodeView, RuntimeState};
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

/// Which API the kubelet is asked through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeletResizeApi {
    /// `pods/resize` (API servers from 1.32 with the gate; always from 1.35).
    Subresource,
    /// `spec.containers[*].resources` of the pod (API servers 1.27–1.31 with the gate).
    PodSpec,
}

impl KubeletResizeApi {
    pub fn describe(self) -> &'static str {
        match self {
            KubeletResizeApi::Subresource => "pods/resize",
            KubeletResizeApi::PodSpec => "the pod spec",
        }
    }
}

/// The resize API the API server serves, from discovery: `pods/resize` where `/api/v1` lists
/// it, the pod spec otherwise (which an API server without the gate refuses, and the refusal
/// says so). The API server decides what it accepts, not the kubelet's release: a 1.30 kubelet
/// behind a 1.32 API server is resized through `pods/resize`.
pub(crate) async fn served_api(client: &::kube::Client) -> Result<KubeletResizeApi, ::kube::Error> {
    let core = client.list_core_api_resources("v1").await?;
    Ok(if core.resources.iter().any(|r| r.name == "pods/resize") {
        KubeletResizeApi::Subresource
    } else {
        KubeletResizeApi::PodSpec
    })
}

/// Whether the node's kubelet resizes in place, and what says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KubeletSupport {
    pub resizes: bool,
    pub why: String,
    /// The pod status will tell soon: containers run whose status the kubelet has not
    /// reported yet, and none that it has. A guess now would stick to the request.
    pub pending: bool,
}

/// Whether the node's kubelet resizes in place, from the strongest evidence at hand:
/// 1. the pod status: a kubelet with the InPlacePodVerticalScaling gate writes what it applied
///    into `containerStatuses[].resources` of every running container (1.27+), a kubelet
///    without it never does, and an API server without the gate drops the field (1.33+) — the
///    same test the API server makes before it accepts a resize (1.32+);
/// 2. `featureGates` in the kubelet's config file (`config_gate`);
/// 3. the release's default: on from 1.33.
pub(crate) fn kubelet_support(view: &NodeView, config_gate: Option<bool>) -> KubeletSupport {
    let no = |why: String| KubeletSupport {
        resizes: false,
        why,
        pending: false,
    };
    let Some(version) = view.kubelet_version.as_deref() else {
        return no("the node's kubelet version is not known yet".into());
    };
    let Some(minor) = KubeletVersion::parse(version).ok().map(|v| v.minor()) else {
        return no(format!("the kubelet version {version:?} cannot be read"));
    };
    if minor < 27 {
        return no(format!("kubelet {version} predates in-place resize (1.27)"));
    }
    let (mut running, mut reporting, mut unreported) = (0usize, 0usize, 0usize);
    // App containers only, as the API server checks: a non-restartable init container never
    // carries `resources`, whatever the kubelet.
    for pod in view.pods.iter().filter(|p| !p.terminating) {
        for c in pod
            .containers
            .iter()
            .filter(|c| c.kind == ContainerKind::Regular)
        {
            let runtime = c
                .runtime
                .as_ref()
                .filter(|r| r.state == RuntimeState::Running);
            // Only a status that shows the running instance running counts (the kubelet
            // reports `resources` of running containers only); one that the runtime or the
            // kubelet shows running without the other yet will count soon.
            match (runtime, &c.status) {
                (Some(runtime), Some(status))
                    if status.container_id == runtime.container_id && status.running =>
                {
                    running += 1;
                    reporting += usize::from(status.reports_resources);
                }
                (Some(_), _) => unreported += 1,
                (None, Some(status)) if status.running => unreported += 1,
                (None, _) => {}
            }
        }
    }
    if running > 0 && reporting == running {
        return KubeletSupport {
            resizes: true,
            why: format!(
                "kubelet {version}: all {running} running containers report applied resources in their pod status"
            ),
            pending: false,
        };
    }
    if running > 0 && reporting == 0 {
        return no(format!(
            "kubelet {version}: none of the {running} running containers report applied resources in their pod status (the InPlacePodVerticalScaling gate is off in the kubelet or the API server)"
        ));
    }
    if running == 0 && unreported > 0 {
        return KubeletSupport {
            resizes: false,
            why: format!(
                "the running containers of kubelet {version} ({unreported}) are not reported alike by the runtime and the pod status yet"
            ),
            pending: true,
        };
    }
    let status_says = if running == 0 {
        "no running container reports a status yet".to_string()
    } else {
        format!("{reporting} of {running} running containers report applied resources")
    };
    match config_gate {
        Some(gate) => KubeletSupport {
            resizes: gate,
            why: format!(
                "kubelet {version}: its config file sets InPlacePodVerticalScaling: {gate} ({status_says})"
            ),
            pending: false,
        },
        None => KubeletSupport {
            resizes: minor >= 33,
            why: format!(
                "kubelet {version}: InPlacePodVerticalScaling is {} by default in this release ({status_says})",
                if minor >= 33 { "on" } else { "off" }
            ),
            pending: false,
        },
    }
}

/// Why no actuator can carry out a resize on this node. Its message is the request's status
/// message, and `inplaced pods` shows it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ActuatorError {
    /// `resize-actuator = kubelet` on a node whose kubelet does not resize in place; `why` is
    /// [`KubeletSupport::why`].
    #[error(
        "resize-actuator is kubelet, but the kubelet does not resize in place: {why} (it needs 1.27+ with the InPlacePodVerticalScaling gate, on by default from 1.33)"
    )]
    KubeletDoesNotResize { why: String },
}

/// The actuator for one pod.
pub(crate) fn choose_actuator(
    setting: ActuatorSetting,
    kubelet: &KubeletSupport,
    static_pod: bool,
) -> Result<Actuator, ActuatorError> {
    // kubelet never resizes static pods: their spec comes from a file, not the API.
    if static_pod || setting == ActuatorSetting::Cri {
        return Ok(Actuator::Cri);
    }
    match (setting, kubelet.resizes) {
        (_, true) => Ok(Actuator::Kubelet),
        (ActuatorSetting::Kubelet, false) => Err(ActuatorError::KubeletDoesNotResize {
            why: kubelet.why.clone(),
        }),
        _ => Ok(Actuator::Cri),
    }
}

/// One line for `inplaced pods`: which actuator a ContainerResizeRequest would get here, and why.
pub fn actuator_line(
    view: &NodeView,
    setting: ActuatorSetting,
    config_gate: Option<bool>,
) -> String {
    let kubelet = kubelet_support(view, config_gate);
    let statics = if view.pods.iter().any(|p| p.static_pod) {
        "; static pods: cri (kubelet never resizes them)"
    } else {
        ""
    };
    if setting == ActuatorSetting::Cri {
        return "resizes: cri (resize-actuator is cri)".to_string();
    }
    if kubelet.pending {
        return format!(
            "resizes: waiting ({}); a request would wait too",
            kubelet.why
        );
    }
    match choose_actuator(setting, &kubelet, false) {
        Ok(actuator) => format!("resizes: {} ({}){statics}", actuator.as_str(), kubelet.why),
        Err(err) => format!("resizes: refused ({err})"),
    }
}

/// `featureGates.InPlacePodVerticalScaling` from the kubelet's config file, if it says.
pub fn resize_gate_from_kubelet_config(path: &Path) -> Option<bool> {
    crate::kubelet_config::gate(
        &crate::kubelet_config::read(path)?,
        "InPlacePodVerticalScaling",
    )
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
    if let Some(in_progress) = condition("PodResizeInProgress") {
        // 1.34+: a memory limit below the container's usage is not applied; the kubelet says
        // why with reason Error and tries again at each sync.
        return Progress::Waiting(match text(in_progress, "reason").as_str() {
            "Error" => format!(
                "the kubelet could not apply the resize and retries: {}",
                text(in_progress, "message")
            ),
            _ => "the kubelet is resizing".into(),
        });
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
            // A kubelet that resizes reports `resources` of every running container (1.27+;
            // of every container from 1.32): not there yet is not done. A non-running
            // container gets its new resources when it starts, and reports them then.
            None => {
                let running = status.and_then(|s| s.pointer("/state/running")).is_some();
                let why = if running {
                    "the pod's status does not report the applied resources of {name} yet"
                } else {
                    "{name} is not running; the kubelet reports its applied resources once it runs"
                };
                return Progress::Waiting(why.replace("{name}", name));
            }
            Some(Err(err)) => {
                return Progress::Waiting(format!(
                    "the pod's status reports resources of {name} that cannot be read: {err}"
                ));
            }
        }
    }
    Progress::Done(applied)
}

/// What survives the trip through the runtime (cpu requests are stored as shares), with the rule
/// of every kubelet that resizes (1.27+).
fn as_runtime_reports(r: &Resources) -> Resources {
    let mut back = resources::from_cri(&resources::cri_resources(
        r,
        resources::ZeroCpuRequest::MinimumShares,
    ));
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

    /// A node view of kubelet `version` whose running containers report resources or not
    /// (`true`/`false` each), plus one that is not running.
    fn view(version: Option<&str>, reports: &[bool]) -> NodeView {
        let times = serde_json::to_value(crate::nodeview::ContainerTimes::default())
            .expect("times serialize");
        let mut containers: Vec<Value> = reports
            .iter()
            .enumerate()
            .map(|(i, reports)| {
                json!({
                    "name": format!("c{i}"), "kind": "regular",
                    "runtime": {"container_id": format!("containerd://{i}"), "id": i.to_string(),
                        "state": "running", "attempt": 0, "restart_count": 0,
                        "stored_hash": null, "stored_hash_without_resources": null,
                        "image": "busybox", "times": times},
                    "hash_check": null,
                    "status": {"container_id": format!("containerd://{i}"), "ready": true,
                        "restart_count": 0, "running": true, "reports_resources": reports},
                })
            })
            .collect();
        containers.push(json!({
            "name": "exited", "kind": "regular",
            "runtime": {"container_id": "containerd://x", "id": "x", "state": "exited",
                "attempt": 0, "restart_count": 0, "stored_hash": null,
                "stored_hash_without_resources": null, "image": "busybox", "times": times},
            "hash_check": null,
            "status": {"container_id": "containerd://x", "ready": false, "restart_count": 0},
        }));
        serde_json::from_value(json!({
            "node_name": "n", "runtime": null, "kubelet_version": version, "synced": true,
            "unmatched_sandboxes": [],
            "pods": [{"namespace": "ns", "name": "p", "uid": "u", "runtime_uid": "u",
                "static_pod": false, "terminating": false, "pod_ip": null, "sandbox_id": null,
                "sandbox_ready": true, "containers": containers}],
        }))
        .expect("a node view")
    }

    #[test]
    fn the_pod_status_says_first_whether_the_kubelet_resizes() {
        let on = kubelet_support(&view(Some("v1.30.14"), &[true, true]), Some(false));
        assert!(on.resizes, "{on:?}");
        assert!(on.why.contains("all 2 running containers report"), "{on:?}");
        let off = kubelet_support(&view(Some("v1.35.0"), &[false]), Some(true));
        assert!(!off.resizes, "{off:?}");
        assert!(off.why.contains("none of the 1 running"), "{off:?}");
    }

    #[test]
    fn without_a_clear_pod_status_the_config_file_then_the_release_default_decide() {
        let config = kubelet_support(&view(Some("v1.30.14"), &[]), Some(true));
        assert!(config.resizes, "{config:?}");
        assert!(config.why.contains("config file"), "{config:?}");
        let mixed = kubelet_support(&view(Some("v1.30.14"), &[true, false]), None);
        assert!(!mixed.resizes, "{mixed:?}");
        assert!(mixed.why.contains("1 of 2"), "{mixed:?}");
        assert!(kubelet_support(&view(Some("v1.33.1"), &[]), None).resizes);
        assert!(!kubelet_support(&view(Some("v1.32.2"), &[]), None).resizes);
        assert!(!kubelet_support(&view(Some("v1.26.3"), &[true]), Some(true)).resizes);
        assert!(!kubelet_support(&view(None, &[true]), Some(true)).resizes);
    }

    #[test]
    fn a_status_the_kubelet_has_not_reported_yet_is_waited_for() {
        let mut lagging = view(Some("v1.30.14"), &[true]);
        lagging.pods[0].containers[0].status = None;
        let support = kubelet_support(&lagging, Some(true));
        assert!(support.pending && !support.resizes, "{support:?}");
        // One reported container settles it, whatever else lags.
        let mut one_reported = view(Some("v1.30.14"), &[true, true]);
        one_reported.pods[0].containers[0].status = None;
        let support = kubelet_support(&one_reported, None);
        assert!(support.resizes && !support.pending, "{support:?}");
        // The runtime runs it, the status still shows the same instance being created (the
        // kubelet has not written that it runs): not "reports nothing", but not yet.
        let mut starting = view(Some("v1.30.14"), &[false]);
        if let Some(status) = starting.pods[0].containers[0].status.as_mut() {
            status.running = false;
        }
        let support = kubelet_support(&starting, None);
        assert!(support.pending && !support.resizes, "{support:?}");
    }

    #[test]
    fn the_actuator_follows_what_the_kubelet_does() {
        use ActuatorSetting::*;
        let yes = KubeletSupport {
            resizes: true,
            why: "seen".into(),
            pending: false,
        };
        let no = KubeletSupport {
            resizes: false,
            why: "not seen".into(),
            pending: false,
        };
        assert_eq!(choose_actuator(Auto, &yes, false), Ok(Actuator::Kubelet));
        assert_eq!(choose_actuator(Auto, &no, false), Ok(Actuator::Cri));
        assert_eq!(choose_actuator(Auto, &yes, true), Ok(Actuator::Cri));
        assert_eq!(choose_actuator(Cri, &yes, false), Ok(Actuator::Cri));
        assert_eq!(choose_actuator(Kubelet, &yes, false), Ok(Actuator::Kubelet));
        assert!(
            choose_actuator(Kubelet, &no, false).is_err_and(|e| e.to_string().contains("not seen"))
        );
        let line = actuator_line(&view(Some("v1.30.14"), &[true]), Auto, None);
        assert!(
            line.starts_with("resizes: kubelet (kubelet v1.30.14: all 1"),
            "{line}"
        );
        let mut lagging = view(Some("v1.30.14"), &[true]);
        lagging.pods[0].containers[0].status = None;
        let line = actuator_line(&lagging, Auto, None);
        assert!(line.starts_with("resizes: waiting ("), "{line}");
        assert_eq!(
            actuator_line(&lagging, Cri, None),
            "resizes: cri (resize-actuator is cri)"
        );
    }

    /// Discovery of each API server release the double models.
    #[tokio::test]
    async fn the_resize_api_is_what_the_api_server_serves() {
        use apiserver_double::{ApiServer, PodResizeApi, ServerConfig};
        for (minor, gate, want) in [
            (31, true, KubeletResizeApi::PodSpec),
            (32, true, KubeletResizeApi::Subresource),
            (32, false, KubeletResizeApi::PodSpec),
            (33, true, KubeletResizeApi::Subresource),
            (36, true, KubeletResizeApi::Subresource),
        ] {
            let server = ApiServer::start(ServerConfig {
                pod_resize: PodResizeApi::for_release(minor, gate),
                ..Default::default()
            })
            .await
            .expect("api server starts");
            let client = node_sandbox::util::kube_client(&server.kubeconfig(None))
                .await
                .expect("client builds");
            assert_eq!(
                served_api(&client).await.expect("discovery"),
                want,
                "1.{minor}, gate {gate}"
            );
        }
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
        let failing = json!({"conditions": [{"type": "PodResizeInProgress", "status": "True",
            "reason": "Error", "message": "memory usage above the new limit"}]});
        assert_eq!(
            progress(&pod("500m", failing), &target),
            Progress::Waiting(
                "the kubelet could not apply the resize and retries: memory usage above the new limit"
                    .into()
            )
        );
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
        // No `resources` in the status: the kubelet has not reported yet (of a running
        // container), or will once the container runs; never done.
        let unreported = json!({"containerStatuses": [{"name": "main", "state": {"running": {}}}]});
        assert_eq!(
            progress(&pod("500m", unreported), &target),
            Progress::Waiting(
                "the pod's status does not report the applied resources of main yet".into()
            )
        );
        let waiting = json!({"containerStatuses": [{"name": "main", "state": {"waiting": {}}}]});
        assert_eq!(
            progress(&pod("500m", waiting), &target),
            Progress::Waiting(
                "main is not running; the kubelet reports its applied resources once it runs"
                    .into()
            )
        );
        let malformed = json!({"containerStatuses": [{"name": "main", "resources": {"limits": {"cpu": "lots"}}}]});
        assert!(matches!(
            progress(&pod("500m", malformed), &target),
            Progress::Waiting(message) if message.contains("cannot be read")
        ));
    }
}
