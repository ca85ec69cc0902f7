//! Before a node-pool upgrade, the fleet's answer (issue 52): two agents, one per node, against
//! one API server double with the shipped admission policy, each with the node-bound identity of
//! its node. Node A runs golden containers with the hashes kubelet 1.30.7 stored and a 1.27
//! status-manager checkpoint (refused by 1.32); node B the same containers with kubelet
//! 1.31.12's hashes; node C has no agent. Expected numbers come from the golden files (real Go
//! code), never from inplaced.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, ServerConfig};
use serde::Deserialize as _;
use serde_json::{Value, json};
use support::agent::AgentProcess;
use support::{TestPod, client, endpoint, unique};

const NAMESPACE: &str = "upgrade-fleet";
const TAGS: &[&str] = &[
    "real-nginx-apiserver-defaulted",
    "real-coredns-apiserver-defaulted",
    "real-redis-apiserver-defaulted",
    "real-etcd-apiserver-defaulted",
    "real-cilium-agent-apiserver-defaulted",
];

/// How many of the golden containers kubelet `to` would restart after kubelet `from`: those
/// whose golden hashes differ between the two releases.
fn golden_restarts(from: &str, to: &str) -> usize {
    TAGS.iter()
        .filter(|tag| {
            support::golden::row(from, tag)["hash"] != support::golden::row(to, tag)["hash"]
        })
        .count()
}

struct FleetNode {
    name: String,
    agent: Option<AgentProcess>,
    pods: Vec<TestPod>,
    _dirs: Vec<tempfile::TempDir>,
}

/// The shipped admission policy, as `kubectl apply -f` would create it.
async fn apply_shipped_policy(server: &ApiServer) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/kubernetes/admission-policy.yaml"
    ))
    .expect("policy");
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc = Value::deserialize(doc).expect("yaml");
        let resource = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => apiserver_double::VALIDATING_ADMISSION_POLICIES,
            Some("ValidatingAdmissionPolicyBinding") => {
                apiserver_double::VALIDATING_ADMISSION_POLICY_BINDINGS
            }
            _ => continue,
        };
        server.store().create(resource, doc).expect("policy object");
    }
}

/// The golden `row`'s container in a pod on `node`: the API pod (owned by a ReplicaSet when
/// `owned`) and a running runtime container under it with the row's stored hash.
async fn golden_pod(
    server: &ApiServer,
    cri: &inplaced::cri::CriClient,
    node: &str,
    row: &Value,
    owned: bool,
) -> (String, TestPod) {
    let container: Value = serde_json::from_str(row["input_text"].as_str().unwrap()).unwrap();
    let container_name = container["name"].as_str().unwrap().to_string();
    let pod_name = unique(&container_name);
    let mut metadata = json!({"name": pod_name, "namespace": NAMESPACE});
    if owned {
        metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": format!("{container_name}-rs"), "uid": "u", "controller": true}]);
    }
    let pod = server
        .store()
        .create(
            "pods",
            json!({"metadata": metadata, "spec": {"nodeName": node, "containers": [container]}}),
        )
        .expect("pod");
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let runtime_pod = TestPod::run_for(cri, &pod_name, NAMESPACE, uid, "fleet").await;
    runtime_pod
        .start_container(
            cri,
            &container_name,
            "exec sleep 600",
            row["hash"].as_str().unwrap(),
        )
        .await;
    (pod_name, runtime_pod)
}

/// A node `name` with kubelet `kubelet` (golden release `golden`) running the golden
/// containers with that release's hashes, and its agent with the node's own identity.
async fn node(
    server: &ApiServer,
    name: &str,
    kubelet: &str,
    golden: &str,
    checkpoint: Option<&str>,
) -> FleetNode {
    server
        .store()
        .create(
            "nodes",
            json!({"metadata": {"name": name, "labels": {"pool": if golden == "1.30.7" { "old" } else { "new" }}},
                   "status": {"nodeInfo": {"kubeletVersion": kubelet}}}),
        )
        .expect("node");
    let cri = client();
    let mut pods = Vec::new();
    for tag in TAGS {
        let row = support::golden::row(golden, tag);
        pods.push(golden_pod(server, &cri, name, &row, true).await.1);
    }
    let token = format!("token-{name}");
    server.tokens().add_with_groups(
        &token,
        &format!("system:node:{name}"),
        &["system:nodes"],
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some(&token)).unwrap();
    let kubelet_root = tempfile::tempdir().unwrap();
    if let Some(fixture) = checkpoint {
        std::fs::copy(
            format!(
                "{}/tests/fixtures/checkpoints/{fixture}",
                env!("CARGO_MANIFEST_DIR")
            ),
            kubelet_root.path().join("pod_status_manager_state"),
        )
        .unwrap();
    }
    let agent = AgentProcess::start(
        &[
            "--node-name",
            name,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--cri-endpoint",
            &endpoint().to_string(),
            "--kubelet-root-dir",
            kubelet_root.path().to_str().unwrap(),
        ],
        None,
    );
    FleetNode {
        name: name.to_owned(),
        agent: Some(agent),
        pods,
        _dirs: vec![dir, kubelet_root],
    }
}

/// The NodeUpgradeCheck of `node` once it has every target of `releases`.
async fn wait_check(server: &ApiServer, node: &str, releases: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(check) = server
            .store()
            .get("nodeupgradechecks.inplaced.io", "", node)
        {
            let targets: Vec<&str> = check["status"]["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["release"].as_str())
                .collect();
            // Written once the agent saw every container (five running).
            let counted = check["status"]["targets"][0]["keep"].as_u64().unwrap_or(0)
                + check["status"]["targets"][0]["restart"]
                    .as_u64()
                    .unwrap_or(0);
            if targets == releases && counted == TAGS.len() as u64 {
                return check;
            }
        }
        assert!(Instant::now() < deadline, "no NodeUpgradeCheck of {node}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn target<'a>(check: &'a Value, release: &str) -> &'a Value {
    check["status"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["release"] == release)
        .unwrap_or_else(|| panic!("no target {release}: {check:#}"))
}

fn fleet(server: &ApiServer, args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin");
    server.write_kubeconfig(&kubeconfig, None).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args([
            "upgrade-check",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ])
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn every_node_answers_and_the_fleet_command_adds_them_up() {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    apply_shipped_policy(&server).await;
    let (a, b, c) = (unique("node-a"), unique("node-b"), unique("node-c"));
    let mut nodes = vec![
        node(
            &server,
            &a,
            "v1.30.7",
            "1.30.7",
            Some("v1.27-pod_status_manager_state"),
        )
        .await,
        node(&server, &b, "v1.31.12", "1.31.12", None).await,
    ];
    server
        .store()
        .create(
            "nodes",
            json!({"metadata": {"name": c}, "status": {"nodeInfo": {"kubeletVersion": "v1.30.7"}}}),
        )
        .unwrap();

    // Each agent's answer for the next two minors after its kubelet.
    let check_a = wait_check(&server, &a, &["1.31", "1.32"]).await;
    let check_b = wait_check(&server, &b, &["1.32", "1.33"]).await;
    let expect = |check: &Value, release: &str, from: &str, to: &str, hazard: bool| {
        let t = target(check, release);
        let restart = golden_restarts(from, to);
        assert_eq!(t["restart"], restart, "{release} after {from}: {t:#}");
        assert_eq!(t["keep"], TAGS.len() - restart, "{t:#}");
        assert_eq!(t["unknown"], 0, "{t:#}");
        assert_eq!(t["checkpointHazard"], hazard, "{t:#}");
    };
    expect(&check_a, "1.31", "1.30.7", "1.31.12", false);
    expect(&check_a, "1.32", "1.30.7", "1.32.10", true);
    expect(&check_b, "1.32", "1.31.12", "1.32.10", false);
    expect(&check_b, "1.33", "1.31.12", "1.33.13", false);
    assert_eq!(check_a["status"]["kubeletVersion"], "v1.30.7");
    let restarted = golden_restarts("1.30.7", "1.32.10");
    if restarted > 0 {
        let workloads = target(&check_a, "1.32")["workloads"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(workloads.len(), restarted, "{workloads:#?}");
        assert!(
            workloads
                .iter()
                .all(|w| w["kind"] == "ReplicaSet" && w["namespace"] == NAMESPACE)
        );
    }

    // The same numbers in the agents' metrics.
    let (_, metrics) = nodes[0].agent.as_ref().unwrap().get("/metrics").unwrap();
    assert!(
        metrics.contains(&format!(
            "inplaced_upgrade_containers{{target=\"1.32\",verdict=\"restart\"}} {restarted}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("inplaced_upgrade_checkpoint_hazard{target=\"1.32\"} 1"),
        "{metrics}"
    );

    // The fleet, for 1.32: both agents' nodes, the node without one, totals.
    let (ok, json_text) = fleet(&server, &["--fleet", "--to", "1.32", "-o", "json"]);
    assert!(ok, "{json_text}");
    let fleet_answer: Value = serde_json::from_str(&json_text).expect(&json_text);
    let ours: Vec<&Value> = fleet_answer["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| [&a, &b, &c].iter().any(|name| n["node"] == name.as_str()))
        .collect();
    assert_eq!(ours.len(), 3, "{fleet_answer:#}");
    let expected_total =
        golden_restarts("1.30.7", "1.32.10") + golden_restarts("1.31.12", "1.32.10");
    assert_eq!(fleet_answer["restart"], expected_total, "{fleet_answer:#}");
    assert_eq!(fleet_answer["nodesWithCheckpointHazard"], 1);
    assert_eq!(fleet_answer["nodesWithoutAnswer"], 1);
    let c_line = ours.iter().find(|n| n["node"] == c.as_str()).unwrap();
    assert!(
        c_line["missing"]
            .as_str()
            .unwrap()
            .contains("no NodeUpgradeCheck")
    );

    // Selected nodes only, and the wide table naming the workloads.
    let (ok, table) = fleet(
        &server,
        &["--to", "1.32", "--nodes", "pool=old", "-o", "wide"],
    );
    assert!(ok, "{table}");
    assert!(table.contains(&a) && !table.contains(&b), "{table}");
    assert!(table.contains("would not start"), "{table}");
    if restarted > 0 {
        assert!(
            table.contains(&format!("{NAMESPACE}/ReplicaSet/")),
            "{table}"
        );
    }

    // The admission policy: node B's agent cannot write node A's answer.
    let b_client = {
        let kubeconfig = server.kubeconfig(Some(&format!("token-{b}")));
        let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    };
    let resource = inplaced::upgrade::resource();
    let checks: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(b_client, &resource);
    let mut forged: kube::api::DynamicObject = serde_json::from_value(check_a.clone()).unwrap();
    forged.data["status"]["targets"] = json!([]);
    match checks.replace(&a, &Default::default(), &forged).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("node B wrote node A's NodeUpgradeCheck: {other:?}"),
    }

    // At rest: nothing more is written.
    let writes = |server: &ApiServer| {
        server
            .audit()
            .entries()
            .iter()
            .filter(|e| e.request.resource == "nodeupgradechecks" && e.request.verb != "get")
            .count()
    };
    let before = writes(&server);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(writes(&server), before, "writes at rest");

    // Churn on node A: a pod that would restart comes and goes every 2 s for 30 s. The answer
    // changes each time; the object is written at most once per MIN_WRITE_INTERVAL (10 s).
    let cri = client();
    let churn_started = Instant::now();
    let before = writes(&server);
    let row = support::golden::row("1.30.7", TAGS[0]);
    let mut changes = 0;
    while churn_started.elapsed() < Duration::from_secs(30) {
        let (pod_name, runtime_pod) = golden_pod(&server, &cri, &a, &row, false).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        runtime_pod.remove(&cri).await;
        server.store().delete("pods", NAMESPACE, &pod_name).unwrap();
        changes += 2;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let churn_seconds = churn_started.elapsed().as_secs_f64();
    let churn_writes = writes(&server) - before;
    eprintln!(
        "churn: {changes} changes of node A's answer in {churn_seconds:.0} s, {churn_writes} writes of its NodeUpgradeCheck ({:.2} per minute)",
        churn_writes as f64 * 60.0 / churn_seconds
    );
    let bound =
        (churn_seconds / inplaced::upgrade::MIN_WRITE_INTERVAL.as_secs_f64()).ceil() as usize + 1;
    assert!(
        (1..=bound).contains(&churn_writes),
        "{churn_writes} writes in {churn_seconds:.0} s (at most {bound})"
    );

    let cri = client();
    for node in &mut nodes {
        drop(node.agent.take());
        for pod in std::mem::take(&mut node.pods) {
            pod.remove(&cri).await;
        }
        let _ = &node.name;
    }
}
