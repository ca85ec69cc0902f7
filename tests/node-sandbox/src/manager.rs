//! The kruise-manager stand-in: what kruise's webhook and its ContainerRecreateRequest controller
//! do around a CRR (`docs/kruise-contract.md`), so that a node agent's CRRs can
//! complete in tests without kruise.
//!
//! - Webhook ([`webhook_mutate`], [`create_crr`]): labels `crr.apps.kruise.io/node-name`,
//!   `pod-uid`, `active=true`; per container `statusContext` {containerID, restartCount} from the
//!   pod status, `preStop` (exec/httpGet/tcpSocket) and `ports` from the pod spec;
//!   `failurePolicy` defaults to Fail, `terminationGracePeriodSeconds` to the pod's. A CRR created
//!   without the webhook (straight into the store)
//!   is mutated by the controller loop as a fallback.
//! - Controller: completes a CRR whose pod is gone or has another UID ("pod has gone"), past
//!   `activeDeadlineSeconds`, or still at phase "" after the response timeout (60 s; "daemon has
//!   not responded for a long time") — completion is phase Completed + completionTime + message,
//!   the container states are left as they are (as kruise does); writes the
//!   `sync-container-statuses` annotation while Recreating; the `unready-acquired` annotation and
//!   finalizer when `unreadyGracePeriodSeconds` is set, also only while Recreating (the pod
//!   readiness gate kruise also flips is not modelled); removes the `active` label and the
//!   finalizer once completed; deletes completed CRRs after `ttlSecondsAfterFinished`.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::util::{now_rfc3339, parse_rfc3339};

pub const LABEL_NODE_NAME: &str = "crr.apps.kruise.io/node-name";
pub const LABEL_POD_UID: &str = "crr.apps.kruise.io/pod-uid";
pub const LABEL_ACTIVE: &str = "crr.apps.kruise.io/active";
pub const ANNOTATION_SYNC_STATUSES: &str = "crr.apps.kruise.io/sync-container-statuses";
pub const ANNOTATION_UNREADY_ACQUIRED: &str = "crr.apps.kruise.io/unready-acquired";
pub const FINALIZER_UNREADY: &str = "crr.apps.kruise.io/unready-acquired";

pub const MSG_POD_GONE: &str = "pod has gone";
pub const MSG_DEADLINE: &str = "recreating has exceeded the activeDeadlineSeconds";
pub const MSG_NO_RESPONSE: &str = "daemon has not responded for a long time";

pub fn crr_resource() -> ApiResource {
    ApiResource {
        group: "apps.kruise.io".into(),
        version: "v1alpha1".into(),
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "ContainerRecreateRequest".into(),
        plural: "containerrecreaterequests".into(),
    }
}

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Kubeconfig document (YAML or JSON text).
    pub kubeconfig: String,
    /// Only this namespace (None: all).
    pub namespace: Option<String>,
    /// kruise fails CRRs still at phase "" this long after creation (60 s).
    pub response_timeout: Duration,
    /// How often every CRR is reconciled.
    pub resync: Duration,
}

impl ManagerConfig {
    pub fn new(kubeconfig: &str) -> Self {
        ManagerConfig {
            kubeconfig: kubeconfig.to_owned(),
            namespace: None,
            response_timeout: Duration::from_secs(60),
            resync: Duration::from_millis(500),
        }
    }
}

/// A running manager stand-in; stops when dropped or [`ManagerStandIn::stop`]ped.
pub struct ManagerStandIn {
    task: JoinHandle<()>,
}

impl ManagerStandIn {
    pub async fn start(config: ManagerConfig) -> anyhow::Result<ManagerStandIn> {
        let client = crate::util::kube_client(&config.kubeconfig).await?;
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = reconcile_all(&client, &config).await {
                    tracing::warn!(error = %e, "manager stand-in");
                }
                tokio::time::sleep(config.resync).await;
            }
        });
        Ok(ManagerStandIn { task })
    }

    pub fn stop(self) {
        drop(self)
    }
}

impl Drop for ManagerStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One entry of the sync-container-statuses annotation, in kruise's (Go) field order.
#[derive(Serialize)]
struct SyncStatus<'a> {
    name: &'a str,
    ready: bool,
    #[serde(rename = "restartCount")]
    restart_count: i64,
    #[serde(rename = "containerID")]
    container_id: &'a str,
}

/// The webhook's mutation of a new CRR for its pod; an error is the webhook's rejection.
pub fn webhook_mutate(crr: &mut Value, pod: &Value) -> Result<(), String> {
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("pod has not been scheduled to a node")?
        .to_owned();
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .ok_or("pod has no uid")?
        .to_owned();
    let containers = crr
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .filter(|c| !c.is_empty())
        .ok_or("spec.containers must not be empty")?;
    for c in containers.iter_mut() {
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .ok_or("container without name")?
            .to_owned();
        let spec = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|x| x["name"] == name.as_str()))
            .ok_or_else(|| format!("container {name} not found in pod"))?;
        let status = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|x| x["name"] == name.as_str()))
            .filter(|s| {
                s.get("containerID")
                    .and_then(Value::as_str)
                    .is_some_and(|i| !i.is_empty())
            })
            .ok_or_else(|| format!("not found containerID of {name} in pod status"))?;
        if let Some(pre_stop) = spec.pointer("/lifecycle/preStop") {
            // v1alpha1's preStop is a ProbeHandler: exec, httpGet, tcpSocket only.
            let mut handler = serde_json::Map::new();
            for k in ["exec", "httpGet", "tcpSocket"] {
                if let Some(v) = pre_stop.get(k) {
                    handler.insert(k.to_owned(), v.clone());
                }
            }
            if !handler.is_empty() {
                c["preStop"] = Value::Object(handler);
            }
        }
        if let Some(ports) = spec.get("ports") {
            c["ports"] = ports.clone();
        }
        c["statusContext"] = json!({
            "containerID": status["containerID"],
            "restartCount": status.get("restartCount").cloned().unwrap_or(json!(0)),
        });
    }
    if crr.pointer("/spec/strategy").is_none() {
        crr["spec"]["strategy"] = json!({});
    }
    if crr.pointer("/spec/strategy/failurePolicy").is_none() {
        crr["spec"]["strategy"]["failurePolicy"] = json!("Fail");
    }
    // kruise's injectPodIntoContainerRecreateRequest: the pod's grace period when unset.
    if crr
        .pointer("/spec/strategy/terminationGracePeriodSeconds")
        .is_none()
        && let Some(grace) = pod.pointer("/spec/terminationGracePeriodSeconds")
    {
        crr["spec"]["strategy"]["terminationGracePeriodSeconds"] = grace.clone();
    }
    if crr
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_none()
    {
        crr["metadata"]["labels"] = json!({});
    }
    crr["metadata"]["labels"][LABEL_NODE_NAME] = json!(node);
    crr["metadata"]["labels"][LABEL_POD_UID] = json!(uid);
    crr["metadata"]["labels"][LABEL_ACTIVE] = json!("true");
    Ok(())
}

/// Creates a CRR as `kubectl create` through kruise's webhook would: mutated for its pod first.
pub async fn create_crr(client: &kube::Client, crr: Value) -> anyhow::Result<Value> {
    let ns = crr
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let pod_name = crr
        .pointer("/spec/podName")
        .and_then(Value::as_str)
        .context("spec.podName is required")?
        .to_owned();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = serde_json::to_value(pods.get(&pod_name).await.context("getting the CRR's pod")?)?;
    let mut crr = crr;
    crr["apiVersion"] = json!("apps.kruise.io/v1alpha1");
    crr["kind"] = json!("ContainerRecreateRequest");
    webhook_mutate(&mut crr, &pod)
        .map_err(|e| anyhow::anyhow!("admission webhook denied the request: {e}"))?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &crr_resource());
    let obj: DynamicObject = serde_json::from_value(crr)?;
    let created = api.create(&PostParams::default(), &obj).await?;
    Ok(serde_json::to_value(created)?)
}

/// The annotation value for a CRR and its pod: only containers running since the CRR's creation.
pub fn sync_container_statuses(crr: &Value, pod: &Value) -> String {
    let created = crr
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339);
    let mut out = Vec::new();
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    for c in crr
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(s) = statuses.and_then(|ss| ss.iter().find(|s| s["name"] == c["name"])) else {
            continue;
        };
        let started = s
            .pointer("/state/running/startedAt")
            .and_then(Value::as_str)
            .and_then(parse_rfc3339);
        let (Some(started), Some(created)) = (started, created) else {
            continue;
        };
        if started < created {
            continue;
        }
        out.push(SyncStatus {
            name: s.get("name").and_then(Value::as_str).unwrap_or(""),
            ready: s.get("ready").and_then(Value::as_bool).unwrap_or(false),
            restart_count: s.get("restartCount").and_then(Value::as_i64).unwrap_or(0),
            container_id: s.get("containerID").and_then(Value::as_str).unwrap_or(""),
        });
    }
    serde_json::to_string(&out).unwrap_or_else(|_| "[]".into())
}

/// A label or annotation value (`map` is `labels` or `annotations`).
fn meta_str(obj: &Value, map: &str, key: &str) -> Option<String> {
    obj.pointer(&format!("/metadata/{map}"))
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn age(obj: &Value, now: SystemTime) -> Duration {
    obj.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
        .and_then(|t| now.duration_since(t).ok())
        .unwrap_or_default()
}

async fn reconcile_all(client: &kube::Client, config: &ManagerConfig) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match &config.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &crr_resource()),
        None => Api::all_with(client.clone(), &crr_resource()),
    };
    let list = api.list(&ListParams::default()).await?;
    for obj in list.items {
        let crr = serde_json::to_value(&obj)?;
        let name = crr
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Err(e) = reconcile(client, config, crr).await {
            tracing::warn!(crr = name, error = %e, "reconciling CRR");
        }
    }
    Ok(())
}

async fn reconcile(
    client: &kube::Client,
    config: &ManagerConfig,
    mut crr: Value,
) -> anyhow::Result<()> {
    let ns = crr
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let name = crr
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &crr_resource());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let phase = crr
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let finalizers: Vec<String> = crr
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect();
    let has_finalizer = finalizers.iter().any(|f| f == FINALIZER_UNREADY);
    let without_finalizer: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != FINALIZER_UNREADY)
        .collect();
    let pp = PatchParams::default();

    if crr.pointer("/metadata/deletionTimestamp").is_some() {
        if has_finalizer {
            api.patch(
                &name,
                &pp,
                &Patch::Merge(json!({"metadata": {"finalizers": without_finalizer}})),
            )
            .await?;
        }
        return Ok(());
    }
    let pod_name = crr
        .pointer("/spec/podName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let pod = match pods.get_opt(&pod_name).await? {
        Some(p) => Some(serde_json::to_value(p)?),
        None => None,
    };

    if phase == "Completed" {
        let mut meta = serde_json::Map::new();
        if meta_str(&crr, "labels", LABEL_ACTIVE).is_some() {
            meta.insert("labels".into(), json!({LABEL_ACTIVE: null}));
        }
        if has_finalizer {
            meta.insert("finalizers".into(), json!(without_finalizer));
        }
        if !meta.is_empty() {
            api.patch(&name, &pp, &Patch::Merge(json!({"metadata": meta})))
                .await?;
        }
        if let Some(ttl) = crr
            .pointer("/spec/ttlSecondsAfterFinished")
            .and_then(Value::as_i64)
        {
            let done = crr
                .pointer("/status/completionTime")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339);
            if let Some(done) = done
                && SystemTime::now() >= done + Duration::from_secs(ttl.max(0) as u64)
            {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        return Ok(());
    }

    // Fallback for CRRs that did not go through the webhook (created straight in the store).
    if meta_str(&crr, "labels", LABEL_NODE_NAME).is_none()
        && let Some(pod) = &pod
    {
        let mut mutated = crr.clone();
        match webhook_mutate(&mut mutated, pod) {
            Ok(()) => {
                api.patch(
                    &name,
                    &pp,
                    &Patch::Merge(json!({
                        "metadata": {"labels": mutated["metadata"]["labels"]},
                        "spec": mutated["spec"],
                    })),
                )
                .await?;
                crr = mutated;
            }
            Err(e) => tracing::warn!(crr = name, error = e, "webhook fallback"),
        }
    }

    let now = SystemTime::now();
    let complete = |msg: &'static str| {
        let api = api.clone();
        let name = name.clone();
        async move {
            let status = json!({"status": {"phase": "Completed", "completionTime": now_rfc3339(), "message": msg}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .map(drop)
        }
    };
    let pod_uid = pod
        .as_ref()
        .and_then(|p| p.pointer("/metadata/uid"))
        .and_then(Value::as_str);
    if pod.is_none() || pod_uid != meta_str(&crr, "labels", LABEL_POD_UID).as_deref() {
        return Ok(complete(MSG_POD_GONE).await?);
    }
    if let Some(deadline) = crr
        .pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        && age(&crr, now) >= Duration::from_secs(deadline.max(0) as u64)
    {
        return Ok(complete(MSG_DEADLINE).await?);
    }
    if phase.is_empty() && age(&crr, now) >= config.response_timeout {
        return Ok(complete(MSG_NO_RESPONSE).await?);
    }
    // Like kruise-manager, nothing more until the daemon has moved the request to Recreating:
    // neither the status sync nor the unready acquisition (a daemon that waits for the
    // acquisition before it moves to Recreating waits forever).
    if phase != "Recreating" {
        return Ok(());
    }
    if let Some(pod) = &pod {
        let value = sync_container_statuses(&crr, pod);
        if meta_str(&crr, "annotations", ANNOTATION_SYNC_STATUSES).as_deref()
            != Some(value.as_str())
        {
            api.patch(
                &name,
                &pp,
                &Patch::Merge(
                    json!({"metadata": {"annotations": {ANNOTATION_SYNC_STATUSES: value}}}),
                ),
            )
            .await?;
        }
    }
    if crr
        .pointer("/spec/strategy/unreadyGracePeriodSeconds")
        .is_some()
        && meta_str(&crr, "annotations", ANNOTATION_UNREADY_ACQUIRED).is_none()
    {
        let mut fins = finalizers.clone();
        if !has_finalizer {
            fins.push(FINALIZER_UNREADY.to_owned());
        }
        api.patch(
            &name,
            &pp,
            &Patch::Merge(json!({"metadata": {
                "finalizers": fins,
                "annotations": {ANNOTATION_UNREADY_ACQUIRED: now_rfc3339()},
            }})),
        )
        .await?;
    }
    Ok(())
}
