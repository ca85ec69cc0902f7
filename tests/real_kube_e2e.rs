//! The agent against real Kubernetes: the real etcd, kube-apiserver and kube-controller-manager
//! of a release, a real kubelet on a containerd of its own, the shipped CRDs, RBAC and admission
//! policies applied as shipped with kubectl (tests/support/real.rs): the agent's own requests.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, NodeConfig, RealNode, wait_until};
use serde_json::{Value, json};
use support::real::*;

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
    let cri = runtime_of(node);
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
    let refused = refused_unauthenticated(&cluster);
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

/// A CRI timestamp (nanoseconds since the epoch) as a time.
fn cri_time(nanos: i64) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(nanos)).unwrap()
}

/// The crash back-off prediction against the real 1.36 kubelet: a first in-place restart is
/// free; a second one is held by the kubelet's back-off, and while it is, the request's
/// container says between which times the kubelet will start it again. The real kubelet starts
/// the new container inside that window (read from the runtime, to the nanosecond), at least
/// 10 s after the old one exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_second_restart_is_started_by_the_real_kubelet_inside_the_predicted_back_off_window() {
    let OneNode {
        cluster: _cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-b", false).await;
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    running(&pods, "web").await;
    let _agent = agent_for(&node, node.kubelet_kubeconfig());
    let first = restart_request(&client, &node, "first", "web").await;
    assert_eq!(
        first.data["status"]["phase"], "Succeeded",
        "{:#}",
        first.data
    );
    let (_, stopped) = app_status(&running(&pods, "web").await);

    let requests: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &inplaced_resource("ContainerRestartRequest", "containerrestartrequests"),
    );
    let second: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "ContainerRestartRequest",
        "metadata": {"name": "second", "namespace": NS,
                     "labels": {"inplaced.io/node-name": node.name}},
        "spec": {"podName": "web"},
    }))
    .unwrap();
    requests
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    let prefix = "the kubelet will start it again after its crash back-off, between ";
    let held = wait_until("the request held by the back-off", WAIT, || {
        let requests = requests.clone();
        async move {
            let r = requests.get("second").await?;
            let message = r.data["status"]["containers"][0]["message"]
                .as_str()
                .unwrap_or("")
                .to_string();
            Ok(message.strip_prefix(prefix).map(str::to_string))
        }
    })
    .await
    .unwrap();
    let (from, to) = held.split_once(" and ").unwrap();
    let from: k8s_openapi::jiff::Timestamp = from.parse().unwrap();
    let to: k8s_openapi::jiff::Timestamp = to.parse().unwrap();
    let done = wait_phase(&requests, "second", &["Succeeded", "Failed"]).await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    let (restarts, started) = app_status(&running(&pods, "web").await);
    assert_eq!(restarts, 2);
    let cri = runtime_of(&node);
    let id = |full: &str| full.rsplit("://").next().unwrap().to_string();
    let exited = cri
        .container_status(&id(&stopped), false)
        .await
        .unwrap()
        .status
        .unwrap()
        .finished_at;
    let began = cri
        .container_status(&id(&started), false)
        .await
        .unwrap()
        .status
        .unwrap()
        .started_at;
    let (exited, began) = (cri_time(exited), cri_time(began));
    eprintln!(
        "exited {exited}, predicted {from} to {to}, started {began} ({:.2} s after the exit)",
        began.duration_since(exited).as_secs_f64()
    );
    assert!(
        began.duration_since(exited).as_secs_f64() >= 10.0,
        "the real kubelet held it its 10 s back-off"
    );
    assert!(
        from <= began && began <= to,
        "the real kubelet started it at {began}, predicted between {from} and {to}"
    );
}

/// inplaced's opt-in outside OpenKruise on a real kubelet, with the dedicated identity: the
/// agent writes the pod's runtime-containers-meta with the hash the real kubelet stored, and
/// when the label the container's env reads changes, restarts the container once so that it
/// sees the new value (same pod, no restart loop afterwards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn an_opted_in_pods_container_restarts_when_the_label_its_env_reads_changes() {
    let OneNode {
        cluster,
        node,
        pods,
        ..
    } = one_node(NEWEST, "rbac-dedicated.yaml", "node-env", false).await;
    let mut opted = pod("env", &node.name);
    opted.metadata.labels = Some([("version".to_string(), "1".to_string())].into());
    opted.metadata.annotations = Some(
        [(
            "inplaced.io/runtime-containers-meta".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    opted.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": "VERSION",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['version']"}}}))
        .unwrap(),
    ]);
    pods.create(&PostParams::default(), &opted).await.unwrap();
    let before = running(&pods, "env").await;
    assert_eq!(container_env(&node, &before, "VERSION").await, "1");
    let _agent = agent_for(&node, &dedicated(&cluster, &node));

    // The annotation, with the hash the real kubelet stored for the container (hex in the
    // runtime, a decimal number in kruise's JSON).
    let (_, id) = app_status(&before);
    let stored = runtime_of(&node)
        .container_status(id.rsplit("://").next().unwrap(), false)
        .await
        .unwrap()
        .status
        .unwrap()
        .annotations
        .get(inplaced::cri::labels::CONTAINER_HASH)
        .cloned()
        .unwrap();
    let stored = u64::from_str_radix(&stored, 16).unwrap();
    let meta = wait_until("the pod's runtime-containers-meta", WAIT, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("env").await?;
            let meta = pod
                .metadata
                .annotations
                .and_then(|a| a.get("apps.kruise.io/runtime-containers-meta").cloned());
            Ok(meta.map(|m| serde_json::from_str::<Value>(&m)))
        }
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(meta["containers"][0]["containerID"], id.as_str(), "{meta}");
    assert_eq!(
        meta["containers"][0]["hashes"]["plainHash"], stored,
        "{meta}"
    );

    pods.patch(
        "env",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"version": "2"}}})),
    )
    .await
    .unwrap();
    wait_until("the container restarted", WAIT, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("env").await?;
            Ok((app_status(&pod).0 >= 1).then_some(()))
        }
    })
    .await
    .unwrap();
    let after = running(&pods, "env").await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");
    assert_eq!(container_env(&node, &after, "VERSION").await, "2");
    // Settled: no second restart for the same change.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = running(&pods, "env").await;
    assert_eq!(app_status(&settled).0, 1, "restarted exactly once");
}

/// The node-bound identity rotated as a real kubelet rotates it: the kubelet's first client
/// certificate lasts 60 s; the kubelet asks for a new one through a CSR (approved and signed by
/// the controller-manager) and re-links `kubelet-client-current.pem`, which its kubeconfig (and
/// so the agent's) names. After the first certificate's end, the same agent process carries
/// out a restart request, and none of its requests was refused as unauthenticated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_kubelets_certificate_rotated_through_a_csr_is_followed_by_the_agent() {
    let cluster =
        ControlPlane::start(ControlPlaneConfig::new(NEWEST).with_kubelet_certificate_rotation())
            .await
            .unwrap();
    apply_shipped(&cluster, "rbac-node-bound.yaml");
    let binding = cluster.dir().join("selfnodeclient.json");
    std::fs::write(&binding, real_cluster::SELF_NODE_CLIENT_BINDING).unwrap();
    kubectl(&cluster, &["apply", &format!("-f={}", binding.display())]);
    let life = Duration::from_secs(60);
    let mut config = NodeConfig::new("node-csr", NEWEST);
    config.rotate_client_certificate_after = Some(life);
    let issued = std::time::Instant::now();
    let node = RealNode::start(&cluster, config).await.unwrap();
    namespace(&cluster).await;
    let client = cluster.admin_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &pod("web", &node.name))
        .await
        .unwrap();
    running(&pods, "web").await;
    let current = node.kubelet_cert_dir().join("kubelet-client-current.pem");
    let first = std::fs::read_link(&current).unwrap();
    let mut agent = agent_for(&node, node.kubelet_kubeconfig());
    let agent_ready = k8s_openapi::jiff::Timestamp::now();

    // The kubelet's renewal: its CSR, approved and issued.
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        Api::all(client.clone());
    let user = format!("system:node:{}", node.name);
    let csr = wait_until("the kubelet's CSR issued", WAIT, || {
        let csrs = csrs.clone();
        let user = user.clone();
        async move {
            let issued = csrs
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .find(|c| {
                    c.spec.username.as_deref() == Some(user.as_str())
                        && c.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet"
                        && c.status.as_ref().is_some_and(|s| s.certificate.is_some())
                });
            Ok(issued)
        }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\nthe kubelet's log ends:\n{}",
            node.kubelet_log_tail(30)
        )
    });
    let asked = csr.metadata.creation_timestamp.clone().unwrap().0;
    // Whole seconds: asked in the second the agent was ready, or later.
    assert!(
        asked.as_second() >= agent_ready.as_second(),
        "the kubelet rotated at {asked}, before the agent ran ({agent_ready}): nothing tried"
    );
    wait_until("kubelet-client-current.pem re-linked", WAIT, || {
        let now = std::fs::read_link(&current).ok();
        let first = first.clone();
        async move { Ok(now.filter(|n| *n != first).map(|_| ())) }
    })
    .await
    .unwrap();
    // Past the first certificate's end (and a second of clock granularity).
    tokio::time::sleep((life + Duration::from_secs(2)).saturating_sub(issued.elapsed())).await;

    let done = restart_request(&client, &node, "after-rotation", "web").await;
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert!(agent.exit_status().is_none(), "the same agent process");
    let refused = refused_unauthenticated(&cluster);
    assert!(
        refused.is_empty(),
        "refused as unauthenticated: {refused:#?}"
    );
    assert_eq!(app_status(&running(&pods, "web").await).0, 1);
}
