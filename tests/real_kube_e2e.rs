//! The agent against real Kubernetes: the real etcd, kube-apiserver and kube-controller-manager
//! of a release, a real kubelet on a containerd of its own, the shipped CRDs, RBAC and admission
//! policies applied as shipped with kubectl (tests/real-cluster; binaries from tests/kube).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, NodeConfig, RealNode, wait_until};
use serde_json::{Value, json};
use support::agent::AgentProcess;

const NS: &str = "inplaced-e2e";
const WAIT: Duration = Duration::from_secs(90);

fn shipped(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/kubernetes")
        .join(file)
}

/// Every shipped manifest, applied as docs/install.md says (server-side, so that a large CRD's
/// annotation limit does not matter), with the CRDs established before the rest.
fn apply_shipped(cluster: &ControlPlane, rbac: &str) {
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

fn kubectl<S: AsRef<str>>(cluster: &ControlPlane, args: &[S]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    cluster
        .kubectl_run(&args)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn every_shipped_admission_policy_is_type_checked_without_warnings() {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");

    // The type checker skips a rule whose apiVersions is "*": every rule names its versions.
    let policies: Value = serde_json::from_str(&kubectl(
        &cluster,
        &[
            "get",
            "validatingadmissionpolicies",
            "-l=app.kubernetes.io/name=inplaced",
            "-o=json",
        ],
    ))
    .unwrap();
    let names: Vec<String> = policies["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.len() >= 2, "the shipped policies: {names:?}");
    for policy in policies["items"].as_array().unwrap() {
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap()
        {
            assert!(
                !rule["apiVersions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "*"),
                "{}: a rule with apiVersions \"*\" is never type-checked: {rule}",
                policy["metadata"]["name"]
            );
        }
    }

    // A policy that must draw a warning shows that the checker runs on these kinds here: a
    // ContainerRecreateRequest has no spec.nodeName.
    let control = cluster.dir().join("control-policy.json");
    std::fs::write(
        &control,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "inplaced-test-checker-runs"},
            "spec": {
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1"],
                    "resources": ["containerrecreaterequests"], "operations": ["CREATE"],
                }]},
                "validations": [{"expression": "object.spec.nodeName == ''"}],
            },
        })
        .to_string(),
    )
    .unwrap();
    kubectl(
        &cluster,
        &[
            "apply",
            "--server-side",
            &format!("-f={}", control.display()),
        ],
    );
    let mut names = names;
    names.push("inplaced-test-checker-runs".into());
    let statuses = wait_until("every policy's type-checking status", WAIT, || {
        let names = names.clone();
        let output = cluster.kubectl_run(&["get", "validatingadmissionpolicies", "-o=json"]);
        async move {
            let all: Value = serde_json::from_str(&output?)?;
            let checked: Vec<Value> = all["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| {
                    names.iter().any(|n| p["metadata"]["name"] == n.as_str())
                        && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                        && p["status"].get("typeChecking").is_some()
                })
                .collect();
            Ok((checked.len() == names.len()).then_some(checked))
        }
    })
    .await
    .unwrap();
    let (control, statuses): (Vec<Value>, Vec<Value>) = statuses
        .into_iter()
        .partition(|p| p["metadata"]["name"] == "inplaced-test-checker-runs");
    assert!(
        control[0]["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty()),
        "the type checker found nothing wrong in a policy that reads a field CRRs do not have: \
         it did not check: {:#}",
        control[0]["status"]
    );
    let warnings: Vec<String> = statuses
        .iter()
        .flat_map(|p| {
            p["status"]["typeChecking"]["expressionWarnings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |w| format!("{}: {w}", p["metadata"]["name"]))
        })
        .collect();
    assert!(
        warnings.is_empty(),
        "type-checking warnings:\n{}",
        warnings.join("\n")
    );
}

/// What most tests start from: a control plane of `release`, the shipped manifests applied
/// with `rbac`, one real node `name` of the same release, the test namespace (with kruise's
/// webhooks acting in it when `kruise`), and the administrator's client and pods API.
struct OneNode {
    cluster: ControlPlane,
    node: RealNode,
    client: kube::Client,
    pods: Api<Pod>,
}

async fn one_node(release: &str, rbac: &str, name: &str, kruise: bool) -> OneNode {
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

fn inplaced_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("inplaced.io", "v1alpha1", kind),
        plural,
    )
}

/// A ContainerRestartRequest `name` of every container of `pod` on `node`, made as a user
/// makes one, waited for until it ends; returns it as it ended.
async fn restart_request(
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
async fn wait_phase(requests: &Api<DynamicObject>, name: &str, phases: &[&str]) -> DynamicObject {
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
fn pod(name: &str, node: &str) -> Pod {
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

async fn namespace(cluster: &ControlPlane) {
    kubectl(cluster, &["create", "namespace", NS]);
    // The controller-manager gives it its ServiceAccount; a pod waits for it to be admitted.
    wait_until("the namespace's default ServiceAccount", WAIT, || {
        let found = cluster.kubectl_run(&["get", "serviceaccount", "default", "-n", NS]);
        async move { Ok(found.ok().map(|_| ())) }
    })
    .await
    .unwrap();
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_until(&format!("pod {name} running and ready"), WAIT, || {
        let pods = pods.clone();
        let name = name.to_string();
        async move {
            let pod = pods.get(&name).await?;
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Ok(ready.then_some(pod))
        }
    })
    .await
    .unwrap()
}

fn app_status(pod: &Pod) -> (i32, String) {
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

fn agent_for(node: &RealNode, kubeconfig: &Path) -> AgentProcess {
    agent_with(node, kubeconfig, &[])
}

/// The agent on `node` as a node's systemd unit would run it, pointed at the node's kubelet
/// files, with `extra` arguments.
fn agent_with(node: &RealNode, kubeconfig: &Path, extra: &[&str]) -> AgentProcess {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_restart_request_restarts_a_real_kubelets_container_with_the_kubelets_identity() {
    let OneNode {
        cluster: _cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-a", false).await;
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    let before = running(&pods, "web").await;
    let (restarts, container) = app_status(&before);
    assert_eq!(restarts, 0);

    // The node-bound identity: the kubelet's own kubeconfig.
    let _agent = agent_for(&node, node.kubelet_kubeconfig());
    let done = restart_request(&client, &node, "restart-web", "web").await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);

    let after = running(&pods, "web").await;
    let (restarts, restarted) = app_status(&after);
    assert_eq!(restarts, 1, "the kubelet started the container once more");
    assert_ne!(restarted, container, "a new container");
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");

    // The shipped policies match the node-bound identity, which is the kubelet's too: they must
    // never refuse the kubelet's own writes. Its node Lease (renewed every 10 s) goes on.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let renewed = |lease: &k8s_openapi::api::coordination::v1::Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.clone())
            .map(|t| t.0)
    };
    // The kubelet makes it once its Node object is there (it owns the Lease).
    let first = wait_until("the kubelet's node Lease", WAIT, || {
        let leases = leases.clone();
        let name = node.name.clone();
        async move { Ok(leases.get_opt(&name).await?.map(|l| renewed(&l))) }
    })
    .await
    .unwrap();
    wait_until(
        "the kubelet's node Lease renewed",
        Duration::from_secs(30),
        || {
            let leases = leases.clone();
            let name = node.name.clone();
            async move {
                let now = renewed(&leases.get(&name).await?);
                Ok((now > first).then_some(()))
            }
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\nthe kubelet's log ends:\n{}",
            node.kubelet_log_tail(30)
        )
    });
}

/// `count` nodes' parts of a rollout, each with two claims and some counts.
fn parts(count: usize, since: &str) -> Value {
    let mut nodes = serde_json::Map::new();
    for i in 0..count {
        let claims: Vec<Value> = (0..2)
            .map(|c| json!({"pod": format!("web-{i}-{c}"), "podUID": format!("uid-{i}-{c}"), "since": since}))
            .collect();
        nodes.insert(
            format!("node-{i}"),
            json!({"matched": 10, "done": 3, "pending": 5, "claims": claims, "failures": []}),
        );
    }
    Value::Object(nodes)
}

/// The rollout policy on a real apiserver, with a rollout of 100 and of 1000 nodes: an agent's
/// heaviest ordinary write (its own part changed and a claim of another node released) is
/// admitted within kube-apiserver's CEL cost limits, and a forbidden one is refused by the rule
/// itself, not by a cost limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_rollout_policy_admits_an_agents_writes_within_the_cel_cost_limits_at_1000_nodes() {
    let mut config = ControlPlaneConfig::new(NEWEST);
    config.controllers.clear();
    let cluster = ControlPlane::start(config).await.unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");
    kubectl(&cluster, &["create", "namespace", NS]);
    let admin = cluster.admin_client().await.unwrap();
    let agent = real_cluster::client_from(
        &cluster
            .kubeconfig_for(
                "agent-node-0.kubeconfig",
                "inplaced:node:node-0",
                Some("inplaced:agents"),
            )
            .unwrap(),
    )
    .await
    .unwrap();
    let resource = inplaced_resource("ContainerRestartRollout", "containerrestartrollouts");
    let as_admin: Api<DynamicObject> = Api::namespaced_with(admin, NS, &resource);
    let as_agent: Api<DynamicObject> = Api::namespaced_with(agent, NS, &resource);
    let since = "2026-12-06T00:00:00Z";
    for count in [100, 1000] {
        let name = format!("web-{count}");
        let rollout: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerRestartRollout",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 100},
        }))
        .unwrap();
        let mut stored = as_admin
            .create(&PostParams::default(), &rollout)
            .await
            .unwrap();
        stored.data["status"] = json!({"phase": "Progressing", "nodes": parts(count, since)});
        let stored = as_admin
            .replace_status(&name, &PostParams::default(), &stored)
            .await
            .unwrap();
        let size = serde_json::to_vec(&stored).unwrap().len();

        // Node 0 claims a third pod and releases a claim of node 1 (whose agent is gone).
        let mut write = stored.clone();
        let nodes = &mut write.data["status"]["nodes"];
        nodes["node-0"]["claims"]
            .as_array_mut()
            .unwrap()
            .push(json!({"pod": "web-0-2", "podUID": "uid-0-2", "since": since}));
        nodes["node-1"]["claims"].as_array_mut().unwrap().remove(0);
        let started = std::time::Instant::now();
        let admitted = as_agent
            .replace_status(&name, &PostParams::default(), &write)
            .await
            .unwrap_or_else(|e| panic!("{count} nodes ({size} bytes): the agent's write: {e}"));
        eprintln!(
            "{count} nodes ({size} bytes): an agent's write admitted in {:.0} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );

        // Another node's count changed: refused by the rule.
        let mut forbidden = admitted.clone();
        forbidden.data["status"]["nodes"]["node-2"]["done"] = json!(9);
        let refused = as_agent
            .replace_status(&name, &PostParams::default(), &forbidden)
            .await
            .expect_err("changing another node's part is refused");
        let message = refused.to_string();
        assert!(
            message.contains("may only remove claims from the part of another node"),
            "{count} nodes: refused for another reason: {message}"
        );
    }
}

/// The agent's requests in the real apiserver's audit log (its User-Agent names it), from
/// stage ResponseStarted (a watch opened) or ResponseComplete (any other request done).
fn agent_requests(cluster: &ControlPlane) -> Vec<Value> {
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

fn describe(event: &Value) -> String {
    format!(
        "{} {} {} -> {}",
        event["stageTimestamp"].as_str().unwrap_or(""),
        event["verb"].as_str().unwrap_or(""),
        event["requestURI"].as_str().unwrap_or(""),
        event["responseStatus"]["code"]
    )
}

/// An idle agent with the dedicated identity, every shipped CRD installed, a pod on its node:
/// the real apiserver's audit log shows its start-up requests all granted by the shipped role,
/// and then, for a minute, nothing at all (its watches stay open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn an_idle_agent_sends_the_real_apiserver_nothing_but_its_open_watches() {
    let OneNode {
        cluster,
        node,
        pods,
        ..
    } = one_node(NEWEST, "rbac-dedicated.yaml", "node-idle", false).await;
    pods.create(&PostParams::default(), &pod("idle", &node.name))
        .await
        .unwrap();
    running(&pods, "idle").await;
    let kubeconfig = cluster
        .kubeconfig_for(
            "agent.kubeconfig",
            &format!("inplaced:node:{}", node.name),
            Some("inplaced:agents"),
        )
        .unwrap();
    let _agent = agent_for(&node, &kubeconfig);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let start_up = agent_requests(&cluster);
    let refused: Vec<String> = start_up
        .iter()
        // 429 is the apiserver's "not yet" for a CRD whose storage is still initializing right
        // after it was applied (the agent retries); 404 is a NodeUpgradeCheck not made yet.
        .filter(|e| matches!(e["responseStatus"]["code"].as_u64(), Some(401 | 403)))
        .map(describe)
        .collect();
    assert!(
        refused.is_empty(),
        "requests the shipped role or the policies refused:\n{}",
        refused.join("\n")
    );
    eprintln!(
        "the agent's {} start-up requests:\n{}",
        start_up.len(),
        start_up.iter().map(describe).collect::<Vec<_>>().join("\n")
    );
    assert!(
        start_up.iter().any(|e| e["verb"] == "watch"),
        "the agent opened no watch"
    );

    tokio::time::sleep(Duration::from_secs(60)).await;
    let later: Vec<String> = agent_requests(&cluster)
        .iter()
        .skip(start_up.len())
        .map(describe)
        .collect();
    assert!(
        later.is_empty(),
        "an idle agent sent, within a minute:\n{}",
        later.join("\n")
    );
}

/// A Burstable pod whose `app` container may be resized (cpu limit 200m).
fn resizable_pod(name: &str, node: &str) -> Pod {
    let mut pod = pod(name, node);
    let container = &mut pod.spec.as_mut().unwrap().containers[0];
    container.resources = Some(
        serde_json::from_value(json!({
            "requests": {"cpu": "100m", "memory": "32Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"},
        }))
        .unwrap(),
    );
    pod
}

/// The cpu quota (µs per period) in the cgroup of the container `id` (its directory under the
/// node's cgroup root in the cpu hierarchy, or the unified one), as the kernel holds it.
fn cpu_quota(node: &RealNode, id: &str) -> Option<i64> {
    let id = id.rsplit("://").next().unwrap_or(id);
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"] {
        let base = Path::new(root).join(node.cgroup_root());
        let found = std::process::Command::new("find")
            .arg(&base)
            .args(["-type", "d", "-name", &format!("*{id}*")])
            .output()
            .ok()?;
        let dir = String::from_utf8_lossy(&found.stdout)
            .lines()
            .next()?
            .to_string();
        if let Ok(quota) = std::fs::read_to_string(Path::new(&dir).join("cpu.cfs_quota_us")) {
            return quota.trim().parse().ok();
        }
        if let Ok(max) = std::fs::read_to_string(Path::new(&dir).join("cpu.max")) {
            return max.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// A ContainerResizeRequest raising `app`'s cpu limit from 200m to 400m on a real node of
/// `release`, with the dedicated identity: carried out by `actuator`, and the container's cgroup
/// then holds the new quota (40 ms per 100 ms period).
async fn resize_on(release: &str, actuator: &str) {
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(release, "rbac-dedicated.yaml", "node-r", false).await;
    pods.create(&PostParams::default(), &resizable_pod("sized", &node.name))
        .await
        .unwrap();
    let before = running(&pods, "sized").await;
    let (_, container) = app_status(&before);
    assert_eq!(
        cpu_quota(&node, &container),
        Some(20_000),
        "the kubelet's quota for 200m"
    );
    let kubeconfig = cluster
        .kubeconfig_for(
            "agent.kubeconfig",
            &format!("inplaced:node:{}", node.name),
            Some("inplaced:agents"),
        )
        .unwrap();
    let _agent = agent_for(&node, &kubeconfig);
    let resource = inplaced_resource("ContainerResizeRequest", "containerresizerequests");
    let requests: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "ContainerResizeRequest",
        "metadata": {"name": "more-cpu", "namespace": NS,
                     "labels": {"inplaced.io/node-name": node.name}},
        "spec": {"podName": "sized", "containers": [
            {"name": "app", "resources": {"limits": {"cpu": "400m"}}}]},
    }))
    .unwrap();
    requests
        .create(&PostParams::default(), &request)
        .await
        .unwrap();
    let done = wait_phase(
        &requests,
        "more-cpu",
        &["Succeeded", "Failed", "Infeasible"],
    )
    .await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert_eq!(done.data["status"]["actuator"], actuator, "{:#}", done.data);
    wait_until("the new quota in the container's cgroup", WAIT, || {
        let quota = cpu_quota(&node, &container);
        async move { Ok((quota == Some(40_000)).then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}: {:?}", cpu_quota(&node, &container)));
    let after = pods.get("sized").await.unwrap();
    assert_eq!(
        app_status(&after),
        app_status(&before),
        "resized in place: no restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_resize_request_goes_through_pods_resize_on_a_1_36_kubelet() {
    resize_on(NEWEST, "kubelet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_resize_request_goes_through_cri_on_a_1_32_kubelet_without_the_gate() {
    resize_on(real_cluster::BEFORE_RESIZE_BETA, "cri").await;
}

/// The dedicated identity's kubeconfig for `node`'s agent.
fn dedicated(cluster: &ControlPlane, node: &RealNode) -> PathBuf {
    cluster
        .kubeconfig_for(
            &format!("agent-{}.kubeconfig", node.name),
            &format!("inplaced:node:{}", node.name),
            Some("inplaced:agents"),
        )
        .unwrap()
}

/// `inplaced upgrade-check --fleet` as a workstation runs it, with the administrator's
/// kubeconfig; its JSON answer.
fn fleet_upgrade_check(cluster: &ControlPlane, to: &str) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args([
            "upgrade-check",
            "--fleet",
            "--to",
            to,
            "-o",
            "json",
            "--kubeconfig",
        ])
        .arg(cluster.admin_kubeconfig())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "upgrade-check --fleet: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The agent's answer for a kubelet upgrade, then the upgrade itself: a 1.32 kubelet under a
/// 1.36 control plane, its answer for 1.36 read with `upgrade-check --fleet`, then the node's
/// kubelet replaced by the real 1.36 one. What the new kubelet restarts is what the answer said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_upgrade_check_answer_is_what_the_real_new_kubelet_does() {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");
    let mut node = RealNode::start(
        &cluster,
        NodeConfig::new("node-u", real_cluster::BEFORE_RESIZE_BETA),
    )
    .await
    .unwrap();
    namespace(&cluster).await;
    let pods: Api<Pod> = Api::namespaced(cluster.admin_client().await.unwrap(), NS);
    for name in ["plain", "sized"] {
        let pod = if name == "sized" {
            resizable_pod(name, &node.name)
        } else {
            pod(name, &node.name)
        };
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let mut before = Vec::new();
    for name in ["plain", "sized"] {
        before.push(app_status(&running(&pods, name).await));
    }
    let kubeconfig = dedicated(&cluster, &node);
    let agent = agent_with(&node, &kubeconfig, &["--upgrade-targets", "1.36"]);
    let answer = wait_until("the node's answer for 1.36", WAIT, || {
        let answer = fleet_upgrade_check(&cluster, "1.36");
        async move {
            let answered = answer["nodesWithoutAnswer"] == 0
                && answer["nodes"].as_array().is_some_and(|n| n.len() == 1);
            Ok(answered.then_some(answer))
        }
    })
    .await
    .unwrap();
    drop(agent);
    assert_eq!(
        answer["restart"].as_u64().unwrap() + answer["keep"].as_u64().unwrap(),
        2,
        "both running containers counted: {answer:#}"
    );
    assert_hashes_match(&node, &pods, "1.32").await;

    node.replace_kubelet(&cluster, NEWEST).await.unwrap();
    // The new kubelet syncs every pod at start; a container it would restart is gone by then.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let mut after = Vec::new();
    for name in ["plain", "sized"] {
        after.push(app_status(&running(&pods, name).await));
    }
    let restarted = before.iter().zip(&after).filter(|(b, a)| b != a).count() as u64;
    assert_eq!(
        restarted,
        answer["restart"].as_u64().unwrap(),
        "the real 1.36 kubelet restarted {restarted} containers; the answer was {answer:#}"
    );
    assert_hashes_match(&node, &pods, "1.36").await;
}

/// Every running container's hash as the node's real kubelet stored it (the runtime's
/// `io.kubernetes.container.hash` annotation) equals `inplaced hash --pod` of the pod as the
/// apiserver serves it, for the kubelet's release.
async fn assert_hashes_match(node: &RealNode, pods: &Api<Pod>, release: &str) {
    let cri = inplaced::cri::CriClient::new(inplaced::cri::CriConfig::new(
        inplaced::cri::CriEndpoint::parse(&node.cri_endpoint).unwrap(),
    ));
    for pod in pods.list(&Default::default()).await.unwrap() {
        let served = serde_json::to_vec(&pod).unwrap();
        let mut hash = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["hash", "--pod", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        hash.stdin.take().unwrap().write_all(&served).unwrap();
        let output = hash.wait_with_output().unwrap();
        assert!(output.status.success());
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let row: Value = serde_json::from_str(line).unwrap();
            let ours = row["releases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| release_in(release, &r["from"], &r["to"]))
                .map(|r| r["hash"].as_str().unwrap().to_string())
                .unwrap();
            let (_, id) = app_status(&pod);
            let id = id.rsplit("://").next().unwrap().to_string();
            let status = cri.container_status(&id, false).await.unwrap();
            let stored = status
                .status
                .unwrap()
                .annotations
                .get(inplaced::cri::labels::CONTAINER_HASH)
                .cloned()
                .unwrap();
            assert_eq!(
                stored, ours,
                "pod {}: the {release} kubelet's stored hash and inplaced's",
                row["pod"]
            );
        }
    }
}

/// Whether `release` (X.Y) lies in the range `from`..=`to` of an `inplaced hash` row.
fn release_in(release: &str, from: &Value, to: &Value) -> bool {
    let minor = |v: &str| {
        v.split('.')
            .nth(1)
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let m = minor(release);
    minor(from.as_str().unwrap()) <= m && m <= minor(to.as_str().unwrap())
}

/// Creates `object` (JSON) with kubectl as the administrator, through every webhook.
fn kubectl_create(cluster: &ControlPlane, name: &str, object: Value) {
    let file = cluster.dir().join(format!("{name}.json"));
    std::fs::write(&file, object.to_string()).unwrap();
    kubectl(cluster, &["create", &format!("-f={}", file.display())]);
}

/// A ContainerRecreateRequest of the container `app` of `pod`, as a user writes one (kruise's
/// webhook adds the rest).
fn crr(name: &str, pod: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"podName": pod, "containers": [{"name": "app"}], "strategy": strategy},
    })
}

fn kruise_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", kind),
        plural,
    )
}

/// The real kruise-manager v1.9.0 with no kruise-daemon, the agent (with the kubelet's identity)
/// as its node half: a ContainerRecreateRequest made with kubectl goes through kruise's webhook
/// (which labels it for the node), the agent recreates the container on the real kubelet, and
/// kruise's manager sees it completed (it drops the CRR's active label).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_crr_made_with_kubectl_under_the_real_kruise_manager_is_carried_out_by_the_agent() {
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-k", true).await;
    let kruise = real_cluster::KruiseManager::start(&cluster, &[])
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    let before = running(&pods, "web").await;
    let _agent = agent_for(&node, node.kubelet_kubeconfig());

    kubectl_create(
        &cluster,
        "crr",
        crr(
            "recreate-web",
            "web",
            json!({"terminationGracePeriodSeconds": 5}),
        ),
    );
    let crrs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kruise_resource("ContainerRecreateRequest", "containerrecreaterequests"),
    );
    let labelled = crrs.get("recreate-web").await.unwrap();
    assert_eq!(
        labelled
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("crr.apps.kruise.io/node-name")),
        Some(&node.name),
        "kruise's webhook labels the CRR with the pod's node"
    );
    let done = wait_until("kruise's manager sees the CRR completed", WAIT, || {
        let crrs = crrs.clone();
        async move {
            let crr = crrs.get("recreate-web").await?;
            let completed = crr.data["status"]["phase"] == "Completed"
                && !crr
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("crr.apps.kruise.io/active"));
            Ok(completed.then_some(crr))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    assert_eq!(
        done.data["status"]["containerRecreateStates"][0]["phase"], "Succeeded",
        "{:#}",
        done.data
    );
    let after = running(&pods, "web").await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");
    assert_eq!(app_status(&after).0, 1, "the container recreated once");
}

/// `unreadyGracePeriodSeconds` under the real kruise-manager: the pod carries kruise's readiness
/// gate; the manager marks it unready (condition KruisePodReady false, the PreRecreateGrace
/// condition on the CRR), the agent kills only once the grace has passed since then, and the
/// manager makes the pod ready again when the CRR completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn under_the_real_kruise_manager_a_crr_waits_out_the_unready_grace_after_the_pod_is_unready()
{
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-g", true).await;
    let kruise = real_cluster::KruiseManager::start(&cluster, &[])
        .await
        .unwrap();
    let mut gated = pod("gated", &node.name);
    gated.spec.as_mut().unwrap().readiness_gates = Some(vec![
        serde_json::from_value(json!({"conditionType": "KruisePodReady"})).unwrap(),
    ]);
    pods.create(&PostParams::default(), &gated).await.unwrap();
    // Nothing has set kruise's condition yet: set it as kruise's readiness control would.
    wait_until("the pod's containers running", WAIT, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("gated").await?;
            Ok(pod
                .status
                .and_then(|s| s.container_statuses)
                .is_some_and(|c| c.iter().all(|c| c.ready))
                .then_some(()))
        }
    })
    .await
    .unwrap();
    let condition = json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "True",
        "lastTransitionTime": "2026-12-06T00:00:00Z"}]}});
    pods.patch_status(
        "gated",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(condition),
    )
    .await
    .unwrap();
    let before = running(&pods, "gated").await;
    let _agent = agent_for(&node, node.kubelet_kubeconfig());

    kubectl_create(
        &cluster,
        "crr-grace",
        crr(
            "graceful",
            "gated",
            json!({"terminationGracePeriodSeconds": 5, "unreadyGracePeriodSeconds": 3}),
        ),
    );
    // Read as kruise 1.9 writes it (v1beta1: the condition is not in v1alpha1's schema).
    let crrs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "apps.kruise.io",
                "v1beta1",
                "ContainerRecreateRequest",
            ),
            "containerrecreaterequests",
        ),
    );
    let saw_unready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = wait_until("the CRR completed", WAIT, || {
        let crrs = crrs.clone();
        let pods = pods.clone();
        let saw = saw_unready.clone();
        async move {
            let pod = pods.get("gated").await?;
            let ready = pod
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready {
                saw.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            let crr = crrs.get("graceful").await?;
            Ok((crr.data["status"]["phase"] == "Completed").then_some(crr))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    assert!(
        saw_unready.load(std::sync::atomic::Ordering::SeqCst),
        "the pod was never unready while the CRR ran"
    );
    let unready_since: k8s_openapi::jiff::Timestamp = done.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "PreRecreateGrace"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .expect("kruise's PreRecreateGrace condition")
        .parse()
        .unwrap();
    let after = running(&pods, "gated").await;
    let app = after
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app"))
        .unwrap();
    let stopped: k8s_openapi::jiff::Timestamp = app
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.finished_at.as_ref())
        .expect("the old container's end")
        .0;
    // Both are whole seconds: at least 3 s apart means at least 2 in whole seconds.
    let waited = stopped.duration_since(unready_since).as_secs();
    assert!(
        waited >= 2,
        "killed {waited} s after the pod was marked unready, with unreadyGracePeriodSeconds 3"
    );
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(app.restart_count, 1);
}

fn cloneset_resource() -> kube::api::ApiResource {
    kruise_resource("CloneSet", "clonesets")
}

/// The CloneSet `web` of `replicas` pods on `node`: InPlaceIfPossible, its container's env
/// `VERSION` read from the pod's label `version`.
fn cloneset(node: &str, replicas: u32, version: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            // One at a time: the default (20 %) rounds down to none of two.
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1},
            "template": {
                "metadata": {"labels": {"app": "web", "version": version}},
                "spec": {
                    "nodeName": node,
                    "hostNetwork": true,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "app",
                        "image": "localhost/busybox:local",
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
                        "env": [{"name": "VERSION",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['version']"}}}],
                    }],
                },
            },
        },
    })
}

/// The CloneSet's status once kruise says every replica is updated and ready.
async fn cloneset_settled(clonesets: &Api<DynamicObject>, replicas: u64) -> anyhow::Result<Value> {
    let result = wait_until(
        "the CloneSet updated and ready",
        Duration::from_secs(120),
        || {
            let clonesets = clonesets.clone();
            async move {
                let set = clonesets.get("web").await?;
                let status = &set.data["status"];
                let settled = status["observedGeneration"] == json!(set.metadata.generation)
                    && status["updatedReadyReplicas"].as_u64() == Some(replicas)
                    && status["readyReplicas"].as_u64() == Some(replicas)
                    && status["updateRevision"] == status["currentRevision"];
                Ok(settled.then(|| status.clone()))
            }
        },
    )
    .await;
    match result {
        Ok(status) => Ok(status),
        Err(e) => {
            let set = clonesets.get("web").await?;
            anyhow::bail!("{e:#}\nthe CloneSet: {:#}", serde_json::to_value(&set)?)
        }
    }
}

/// What the container `app` of `pod` sees as `$VERSION`, asked of the runtime.
async fn env_version(node: &RealNode, pod: &Pod) -> String {
    let (_, id) = app_status(pod);
    let id = id.rsplit("://").next().unwrap().to_string();
    let cri = inplaced::cri::CriClient::new(inplaced::cri::CriConfig::new(
        inplaced::cri::CriEndpoint::parse(&node.cri_endpoint).unwrap(),
    ));
    let answer = cri
        .exec_sync(
            &id,
            vec!["/bin/sh".into(), "-c".into(), "echo -n $VERSION".into()],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    String::from_utf8_lossy(&answer.stdout).into_owned()
}

/// A CloneSet InPlaceIfPossible update of a label its container reads as env, under the real
/// kruise-manager with InPlaceUpdateEnvFromMetadata: kruise patches the pods' labels, the agent
/// (kruise-daemon's container-meta half) restarts each container so that it sees the new value
/// and writes runtime-containers-meta, and kruise's own status ends updated and ready; the pods
/// keep their UIDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_cloneset_in_place_env_from_metadata_update_ends_updated_and_ready_under_the_real_kruise()
{
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-c", true).await;
    let kruise =
        real_cluster::KruiseManager::start(&cluster, &["InPlaceUpdateEnvFromMetadata=true"])
            .await
            .unwrap();
    let _agent = agent_for(&node, node.kubelet_kubeconfig());
    let clonesets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &cloneset_resource());
    kubectl_create(&cluster, "cloneset", cloneset(&node.name, 2, "1"));
    cloneset_settled(&clonesets, 2)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    let listed = |pods: Vec<Pod>| {
        let mut by_name: Vec<(String, Pod)> = pods
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        by_name.sort_by(|a, b| a.0.cmp(&b.0));
        by_name
    };
    let selector = kube::api::ListParams::default().labels("app=web");
    let before = listed(pods.list(&selector).await.unwrap().items);
    for (_, pod) in &before {
        assert_eq!(env_version(&node, pod).await, "1");
    }

    let template_label = json!({"spec": {"template": {"metadata": {"labels": {"version": "2"}}}}});
    clonesets
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(template_label),
        )
        .await
        .unwrap();
    cloneset_settled(&clonesets, 2)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    let after = listed(pods.list(&selector).await.unwrap().items);
    assert_eq!(after.len(), before.len());
    for ((name, old), (_, new)) in before.iter().zip(&after) {
        assert_eq!(new.metadata.uid, old.metadata.uid, "{name} kept its UID");
        assert_eq!(
            app_status(new).0,
            app_status(old).0 + 1,
            "{name}'s container restarted once"
        );
        assert_eq!(
            env_version(&node, new).await,
            "2",
            "{name} sees the new label"
        );
    }
}

/// Ready one second after it starts (a readiness probe looks for the file): each restart shows.
const SLOW_READY: &str =
    "trap 'exit 0' TERM; (sleep 1; touch /tmp/ready) & while true; do sleep 0.1; done";

fn slow_ready_pod(name: &str, node: &str, label: &str) -> Pod {
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

/// Two real nodes (two kubelets, each on a containerd of its own), an agent on each with its
/// dedicated identity: a ContainerRestartRollout applied with kubectl restarts all six pods
/// once each, never more than its budget of 2 unready at once as the apiserver saw it, and ends
/// Succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_rollout_applied_with_kubectl_restarts_every_pod_across_two_real_nodes_within_its_budget()
{
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");
    let mut nodes = Vec::new();
    for name in ["node-1", "node-2"] {
        nodes.push(
            RealNode::start(&cluster, NodeConfig::new(name, NEWEST))
                .await
                .unwrap(),
        );
    }
    namespace(&cluster).await;
    let client = cluster.admin_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut names = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for i in 0..3 {
            let name = format!("roll-{n}-{i}");
            pods.create(
                &PostParams::default(),
                &slow_ready_pod(&name, &node.name, "roll"),
            )
            .await
            .unwrap();
            names.push(name);
        }
    }
    for name in &names {
        running(&pods, name).await;
    }
    let _agents: Vec<AgentProcess> = nodes
        .iter()
        .map(|node| agent_for(node, &dedicated(&cluster, node)))
        .collect();
    let (stop, most) = support::most_unready(pods.clone(), "app=roll");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    kubectl_create(
        &cluster,
        "rollout",
        json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerRestartRollout",
            "metadata": {"name": "roll", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "roll"}}, "maxUnavailable": 2},
        }),
    );
    let rollouts: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &inplaced_resource("ContainerRestartRollout", "containerrestartrollouts"),
    );
    let done = wait_phase(&rollouts, "roll", &["Succeeded", "Failed"]).await;
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = most.await.unwrap();
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert!(
        most <= 2,
        "{most} pods unready at once with maxUnavailable 2"
    );
    assert!(most >= 1, "the watch saw no restart");
    for name in &names {
        let pod = running(&pods, name).await;
        assert_eq!(app_status(&pod).0, 1, "{name} restarted exactly once");
    }
    eprintln!(
        "6 pods on 2 real nodes, budget 2: {:.1} s, at most {most} unready at once",
        took.as_secs_f64()
    );
}

/// The dedicated identity's client certificate rotated under a running agent, as a node's
/// certificate tooling does: the agent starts with one that expires 25 s later; its kubeconfig
/// is rewritten with a new one; after the first has expired, a restart request is still carried
/// out (its status writes are new requests, which the real apiserver authenticates afresh), by
/// the same agent process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_rotated_client_certificate_is_used_before_the_old_one_expires() {
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-dedicated.yaml", "node-rot", false).await;
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    running(&pods, "web").await;
    let user = format!("inplaced:node:{}", node.name);
    let issued = std::time::Instant::now();
    let short = cluster
        .ca
        .client_valid_for(&user, Some("inplaced:agents"), Duration::from_secs(25))
        .unwrap();
    let kubeconfig = cluster.kubeconfig_with("agent.kubeconfig", &short).unwrap();
    let mut agent = agent_for(&node, &kubeconfig);
    let fresh = cluster.ca.client(&user, Some("inplaced:agents")).unwrap();
    cluster.kubeconfig_with("agent.kubeconfig", &fresh).unwrap();
    // Past the first certificate's end (and a second of clock granularity).
    tokio::time::sleep(Duration::from_secs(27).saturating_sub(issued.elapsed())).await;

    let done = restart_request(&client, &node, "after-rotation", "web").await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert!(
        agent.exit_status().is_none(),
        "the same agent, not restarted"
    );
    // None of its requests went out with the expired certificate: the first one after the
    // rotation waits for the look at the files that finds it (before, a request sent beside
    // that look was refused, 401, and written again after a back-off).
    let refused: Vec<String> = agent_requests(&cluster)
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 401)
        .map(describe)
        .collect();
    assert!(
        refused.is_empty(),
        "refused as unauthenticated: {refused:#?}"
    );
    let app = app_status(&running(&pods, "web").await);
    assert_eq!(app.0, 1, "restarted once");
}

/// The kubelet restarted under a running agent (an operator's `systemctl restart kubelet`): the
/// agent stays ready, takes the new kubelet for its node's (its process name), and carries out
/// a restart request with the new kubelet, which starts the container again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_kubelet_restarted_under_the_agent_changes_nothing_for_its_requests() {
    let OneNode {
        cluster: _cluster,
        mut node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-kr", false).await;
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    let before = running(&pods, "web").await;
    let mut agent = agent_for(&node, node.kubelet_kubeconfig());
    let first = node.kubelet_pid();
    node.stop_kubelet();
    node.start_kubelet().unwrap();
    assert_ne!(node.kubelet_pid(), first, "a new kubelet process");
    // The agent keeps serving while the kubelet is away and back.
    agent.wait_http("/readyz", 200, Duration::from_secs(30));

    let done = restart_request(&client, &node, "after-kubelet-restart", "web").await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    let after = running(&pods, "web").await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");
    assert_eq!(
        app_status(&after).0,
        1,
        "the new kubelet started it once more"
    );
    assert!(agent.exit_status().is_none(), "the same agent");
}
