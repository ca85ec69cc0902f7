//! What the real Kubernetes tier's tests share (tests/real_kube_*.rs): a control plane and real
//! nodes from tests/real-cluster (binaries from tests/kube), the shipped CRDs, RBAC and admission
//! policies applied as shipped with kubectl, the agent run as a node's unit runs it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NodeConfig, RealNode, wait_until};
use serde_json::{Value, json};

use super::agent::AgentProcess;

pub const NS: &str = "inplaced-e2e";
pub const WAIT: Duration = Duration::from_secs(90);

pub fn shipped(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/kubernetes")
        .join(file)
}

/// Every shipped manifest, applied as docs/install.md says (server-side, so that a large CRD's
/// annotation limit does not matter), with the CRDs established before the rest.
pub fn apply_shipped(cluster: &ControlPlane, rbac: &str) {
    let crds: Vec<PathBuf> = std::fs::read_dir(shipped(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("crd-"))
        .collect();
    let mut args = vec!["apply".to_string(), "--server-side".into()];
    for crd in &crds {
        args.push(format!("-f={}", crd.display()));
    }
    // OpenKruise's ContainerRecreateRequest, as kruise ships it (the policies match it too).
    let kruise_crr =
        real_cluster::kruise_crd("apps.kruise.io_containerrecreaterequests.yaml").unwrap();
    args.push(format!("-f={}", kruise_crr.display()));
    kubectl(cluster, &args);
    kubectl(
        cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
    );
    kubectl(
        cluster,
        &[
            "apply",
            "--server-side",
            &format!("-f={}", shipped(rbac).display()),
            &format!("-f={}", shipped("admission-policy.yaml").display()),
        ],
    );
}

pub fn kubectl<S: AsRef<str>>(cluster: &ControlPlane, args: &[S]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    cluster
        .kubectl_run(&args)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// What most tests start from: a control plane of `release`, the shipped manifests applied
/// with `rbac`, one real node `name` of the same release, the test namespace (with kruise's
/// webhooks acting in it when `kruise`), and the administrator's client and pods API.
pub struct OneNode {
    pub cluster: ControlPlane,
    pub node: RealNode,
    pub client: kube::Client,
    pub pods: Api<Pod>,
}

pub async fn one_node(release: &str, rbac: &str, name: &str, kruise: bool) -> OneNode {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(release))
        .await
        .unwrap();
    apply_shipped(&cluster, rbac);
    let node = RealNode::start(&cluster, NodeConfig::new(name, release))
        .await
        .unwrap();
    namespace(&cluster).await;
    if kruise {
        kubectl(
            &cluster,
            &[
                "label",
                "namespace",
                NS,
                &format!("{}=on", real_cluster::WEBHOOK_NAMESPACE_LABEL),
            ],
        );
    }
    let client = cluster.admin_client().await.unwrap();
    let pods = Api::namespaced(client.clone(), NS);
    OneNode {
        cluster,
        node,
        client,
        pods,
    }
}

pub fn inplaced_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("inplaced.io", "v1alpha1", kind),
        plural,
    )
}

/// A ContainerRestartRequest `name` of every container of `pod` on `node`, made as a user
/// makes one, waited for until it ends; returns it as it ended.
pub async fn restart_request(
    client: &kube::Client,
    node: &RealNode,
    name: &str,
    pod: &str,
) -> DynamicObject {
    let requests: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &inplaced_resource("ContainerRestartRequest", "containerrestartrequests"),
    );
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "ContainerRestartRequest",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"inplaced.io/node-name": node.name}},
        "spec": {"podName": pod},
    }))
    .unwrap();
    requests
        .create(&PostParams::default(), &request)
        .await
        .unwrap();
    wait_phase(&requests, name, &["Succeeded", "Failed"]).await
}

/// Waits until the request `name` reaches one of `phases` (its status.phase); returns it.
pub async fn wait_phase(
    requests: &Api<DynamicObject>,
    name: &str,
    phases: &[&str],
) -> DynamicObject {
    wait_until(&format!("{name} in phase {phases:?}"), WAIT, || {
        let requests = requests.clone();
        let name = name.to_string();
        async move {
            let r = requests.get(&name).await?;
            let phase = r.data["status"]["phase"].as_str().unwrap_or("").to_string();
            Ok(phases.contains(&phase.as_str()).then_some(r))
        }
    })
    .await
    .unwrap()
}

/// An `app` container that stops at once on SIGTERM, on `node`, host network (no CNI here).
pub fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "app",
                "image": "localhost/busybox:local",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
            }],
        },
    }))
    .unwrap()
}

pub async fn namespace(cluster: &ControlPlane) {
    kubectl(cluster, &["create", "namespace", NS]);
    // The controller-manager gives it its ServiceAccount; a pod waits for it to be admitted.
    wait_until("the namespace's default ServiceAccount", WAIT, || {
        let found = cluster.kubectl_run(&["get", "serviceaccount", "default", "-n", NS]);
        async move { Ok(found.ok().map(|_| ())) }
    })
    .await
    .unwrap();
}

pub async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_until(&format!("pod {name} running and ready"), WAIT, || {
        let pods = pods.clone();
        let name = name.to_string();
        async move {
            let pod = pods.get(&name).await?;
            Ok(super::pod_ready(&pod).then_some(pod))
        }
    })
    .await
    .unwrap()
}

pub fn app_status(pod: &Pod) -> (i32, String) {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app"))
        .expect("app's status");
    (
        status.restart_count,
        status.container_id.clone().unwrap_or_default(),
    )
}

pub fn agent_for(node: &RealNode, kubeconfig: &Path) -> AgentProcess {
    agent_with(node, kubeconfig, &[])
}

/// The agent on `node` as a node's systemd unit would run it, pointed at the node's kubelet
/// files, with `extra` arguments.
pub fn agent_with(node: &RealNode, kubeconfig: &Path, extra: &[&str]) -> AgentProcess {
    let root_dir = node.kubelet_root_dir();
    let config = node.kubelet_config_file();
    let process = node.kubelet_process_name();
    let mut args = vec![
        "--kubelet-process-name",
        &process,
        "--node-name",
        &node.name,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--cri-endpoint",
        &node.cri_endpoint,
        "--kubelet-root-dir",
        root_dir.to_str().unwrap(),
        "--kubelet-config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let agent = AgentProcess::start(&args, None);
    agent.wait_http("/readyz", 200, Duration::from_secs(60));
    agent
}

/// The agent's requests in the real apiserver's audit log (its User-Agent names it), from
/// stage ResponseStarted (a watch opened) or ResponseComplete (any other request done).
pub fn agent_requests(cluster: &ControlPlane) -> Vec<Value> {
    cluster
        .audit_events()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("inplaced/"))
                && (e["stage"] == "ResponseComplete" && e["verb"] != "watch"
                    || e["stage"] == "ResponseStarted")
        })
        .collect()
}

pub fn describe(event: &Value) -> String {
    format!(
        "{} {} {} -> {}",
        event["stageTimestamp"].as_str().unwrap_or(""),
        event["verb"].as_str().unwrap_or(""),
        event["requestURI"].as_str().unwrap_or(""),
        event["responseStatus"]["code"]
    )
}

/// The dedicated identity's kubeconfig for `node`'s agent.
pub fn dedicated(cluster: &ControlPlane, node: &RealNode) -> PathBuf {
    cluster
        .kubeconfig_for(
            &format!("agent-{}.kubeconfig", node.name),
            &format!("inplaced:node:{}", node.name),
            Some("inplaced:agents"),
        )
        .unwrap()
}

/// Creates `object` (JSON) with kubectl as the administrator, through every webhook.
pub fn kubectl_create(cluster: &ControlPlane, name: &str, object: Value) {
    let file = cluster.dir().join(format!("{name}.json"));
    std::fs::write(&file, object.to_string()).unwrap();
    kubectl(cluster, &["create", &format!("-f={}", file.display())]);
}

/// A ContainerRecreateRequest of the container `app` of `pod`, as a user writes one (kruise's
/// webhook adds the rest).
pub fn crr(name: &str, pod: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"podName": pod, "containers": [{"name": "app"}], "strategy": strategy},
    })
}

pub fn kruise_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", kind),
        plural,
    )
}

/// Ready one second after it starts (a readiness probe looks for the file): each restart shows.
pub const SLOW_READY: &str =
    "trap 'exit 0' TERM; (sleep 1; touch /tmp/ready) & while true; do sleep 0.1; done";

pub fn slow_ready_pod(name: &str, node: &str, label: &str) -> Pod {
    let mut pod = pod(name, node);
    pod.metadata.labels = Some([("app".to_string(), label.to_string())].into());
    let container = &mut pod.spec.as_mut().unwrap().containers[0];
    container.command = Some(vec!["/bin/sh".into(), "-c".into(), SLOW_READY.into()]);
    container.readiness_probe = Some(
        serde_json::from_value(json!({"exec": {"command": ["test", "-f", "/tmp/ready"]},
                                      "periodSeconds": 1}))
        .unwrap(),
    );
    pod
}

/// The node's runtime, as the tests ask it.
pub fn runtime_of(node: &RealNode) -> inplaced::cri::CriClient {
    inplaced::cri::CriClient::new(inplaced::cri::CriConfig::new(
        inplaced::cri::CriEndpoint::parse(&node.cri_endpoint).unwrap(),
    ))
}

/// What the container `app` of `pod` sees as `$name`, asked of the runtime.
pub async fn container_env(node: &RealNode, pod: &Pod, name: &str) -> String {
    let (_, id) = app_status(pod);
    let id = id.rsplit("://").next().unwrap().to_string();
    let answer = runtime_of(node)
        .exec_sync(
            &id,
            vec!["/bin/sh".into(), "-c".into(), format!("echo -n ${name}")],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    String::from_utf8_lossy(&answer.stdout).into_owned()
}

/// The agent's requests the real apiserver refused as unauthenticated (401), described.
pub fn refused_unauthenticated(cluster: &ControlPlane) -> Vec<String> {
    agent_requests(cluster)
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 401)
        .map(describe)
        .collect()
}
