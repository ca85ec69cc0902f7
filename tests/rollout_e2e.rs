//! ContainerRestartRollouts end to end: several nodes (each its kubelet stand-in, CRI proxy and
//! agent, on the one real containerd and one API double under the shipped admission policy),
//! a rollout made as a user makes it, and the agents carrying it out together. How many pods
//! were unavailable at once is read from the API's own order of events (a watch of the pods):
//! it must never exceed the rollout's budget.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use support::cluster::Cluster;
use support::sandbox::{NS, container_id, wait_stored};

const ROLLOUTS: &str = "containerrestartrollouts.inplaced.io";

/// Ready one second after it starts (its probe looks for the file), so that each restart
/// leaves the pod visibly unready for a while; exits at once on SIGTERM.
const SLOW_READY: &str =
    "trap 'exit 0' TERM; (sleep 1; touch /tmp/ready) & while true; do sleep 0.1; done";

fn web_spec() -> Value {
    json!({"containers": [{
        "name": "app",
        "image": "localhost/busybox:local",
        "command": ["/bin/sh", "-c", SLOW_READY],
        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1},
    }]})
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The most pods of `selector` unready at once, over the API's sequence of pod events from now.
fn unavailable_high_water(
    client: kube::Client,
    selector: &str,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let most = Arc::new(Mutex::new(0usize));
    let seen = most.clone();
    let api: Api<Pod> = Api::namespaced(client, NS);
    let config = watcher::Config::default().labels(selector);
    let task = tokio::spawn(async move {
        let mut readiness: HashMap<String, bool> = HashMap::new();
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    readiness.insert(
                        pod.metadata.uid.clone().unwrap_or_default(),
                        pod_ready(&pod),
                    );
                }
                watcher::Event::Delete(pod) => {
                    readiness.remove(&pod.metadata.uid.clone().unwrap_or_default());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            let unready = readiness.values().filter(|r| !**r).count();
            let mut most = seen.lock().unwrap();
            *most = (*most).max(unready);
        }
    });
    (most, task)
}

fn rollout_resource() -> kube::api::ApiResource {
    inplaced::rollout::rollout_resource()
}

async fn create_rollout(cluster: &Cluster, name: &str, spec: Value) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), NS, &rollout_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "ContainerRestartRollout",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

fn rollout(cluster: &Cluster, name: &str) -> Value {
    cluster
        .server
        .store()
        .get(ROLLOUTS, NS, name)
        .unwrap_or_default()
}

async fn wait_rollout(
    cluster: &Cluster,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_stored(&cluster.server, ROLLOUTS, name, timeout, pred).await
}

fn phase(object: &Value) -> &str {
    object["status"]["phase"].as_str().unwrap_or("")
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
}

/// Pods `web-<node>-<i>` on every node, and one pod of another app on node 0; returns
/// (pod name → its app container's ID).
async fn run_web_pods(cluster: &Cluster, per_node: usize) -> HashMap<String, String> {
    let mut ids = HashMap::new();
    for i in 0..cluster.nodes.len() {
        for p in 0..per_node {
            let name = format!("web-{i}-{p}-{}", support::unique("p"));
            let pod = cluster
                .run_pod(i, &name, json!({"app": "web"}), web_spec())
                .await;
            ids.insert(name, container_id(&pod, "app"));
        }
    }
    for name in ids.keys() {
        cluster.wait_pod(name, Duration::from_secs(30), ready).await;
    }
    ids
}

/// Every pod of `ids` restarted exactly once (one stop of its old container, through its own
/// node's agent), and ready again. A stop an agent had in flight when it was killed is repeated
/// by its successor (the proxy counted it, but the runtime may never have carried it out): that
/// second stop of the same container, logged `resumed=true`, is allowed; a third never is.
async fn assert_each_restarted_once(cluster: &Cluster, ids: &HashMap<String, String>) {
    assert_restarted_once_among(cluster, ids, ids).await;
}

/// As [`assert_each_restarted_once`] for the pods of `ids`, where the containers stopped may
/// be those of any pod of `targeted` (pods deleted since among them).
async fn assert_restarted_once_among(
    cluster: &Cluster,
    ids: &HashMap<String, String>,
    targeted: &HashMap<String, String>,
) {
    let mut stopped: HashMap<String, usize> = HashMap::new();
    let mut logs = String::new();
    for node in &cluster.nodes {
        for (id, count) in node.proxy.stop_counts() {
            *stopped.entry(id).or_default() += count;
        }
        if let Some(agent) = &node.agent {
            logs.push_str(&agent.log());
        }
    }
    for (pod, old) in ids {
        let stops = stopped.get(old).copied().unwrap_or(0);
        let resumed = logs
            .lines()
            .any(|l| l.contains(old.as_str()) && l.contains("resumed=true"));
        assert!(
            stops == 1 || (stops == 2 && resumed),
            "pod {pod}: its container {old} stopped {stops} times (resumed: {resumed})"
        );
        let now = cluster.wait_pod(pod, Duration::from_secs(30), ready).await;
        assert_ne!(
            &container_id(&now, "app"),
            old,
            "pod {pod} runs a new container"
        );
    }
    let targeted: HashSet<&String> = targeted.values().collect();
    for id in stopped.keys() {
        assert!(
            targeted.contains(id),
            "{id} was stopped but is no pod of the rollout"
        );
    }
}

/// The rollout `web` of the four pods of `ids` (budget 1) ends: each pod restarted once, and
/// never more than one unavailable at once over the `watch`ed events.
async fn ends_within_one_unavailable(
    cluster: Cluster,
    ids: &HashMap<String, String>,
    most: Arc<Mutex<usize>>,
    watch: tokio::task::JoinHandle<()>,
) {
    let done = wait_rollout(&cluster, "web", Duration::from_secs(120), |r| {
        phase(r) == "Succeeded"
    })
    .await;
    watch.abort();
    assert_eq!(done["status"]["done"], 4, "{:#}", done["status"]);
    let most = *most.lock().unwrap();
    assert!(most <= 1, "{most} pods unavailable at once, budget 1");
    assert_each_restarted_once(&cluster, ids).await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn three_nodes_restart_every_pod_once_never_more_unavailable_than_the_budget() {
    let cluster = Cluster::start(3, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    let other = cluster
        .run_pod(0, "db-0", json!({"app": "db"}), web_spec())
        .await;
    let (most, watch) = unavailable_high_water(cluster.client.clone(), "app=web");
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 2}),
    )
    .await;
    let done = wait_rollout(&cluster, "web", Duration::from_secs(120), |r| {
        phase(r) == "Succeeded"
    })
    .await;
    watch.abort();
    let status = &done["status"];
    assert_eq!(
        (status["matched"].as_u64(), status["done"].as_u64()),
        (Some(6), Some(6)),
        "{status:#}"
    );
    assert_eq!(status["failed"], 0);
    assert_eq!(status["inProgress"], 0);
    assert_eq!(
        condition(&done, "Complete").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert!(status["completionTime"].is_string());
    assert!(
        status["nodes"]
            .as_object()
            .is_none_or(|parts| parts.is_empty()),
        "no claim, failure or skipped pod left to say of any node: {status:#}"
    );
    let most = *most.lock().unwrap();
    assert!(most <= 2, "{most} pods unavailable at once, budget 2");
    assert!(most >= 1, "the watch saw the restarts");
    assert_each_restarted_once(&cluster, &ids).await;
    // The other app's pod was left alone.
    let db = cluster.pod("db-0").unwrap();
    assert_eq!(container_id(&db, "app"), container_id(&other, "app"));
    // One request per pod, owned by the rollout, made by the pod's own node's agent.
    let requests = cluster
        .server
        .store()
        .list("containerrestartrequests.inplaced.io", NS);
    assert_eq!(requests.len(), 6);
    for request in &requests {
        assert_eq!(request["metadata"]["ownerReferences"][0]["name"], "web");
        assert_eq!(request["status"]["phase"], "Succeeded");
    }
    // Every request an agent made is one the dedicated identity's role grants.
    let denied: Vec<String> = cluster
        .server
        .audit()
        .not_allowed_by(&Value::Array(support::cluster_roles("rbac-dedicated.yaml")))
        .into_iter()
        .filter(|e| e.request.user.starts_with("inplaced:node:") && e.request.is_resource)
        .map(|e| {
            format!(
                "{} {} {}",
                e.request.verb, e.request.resource, e.request.subresource
            )
        })
        .collect();
    assert!(
        denied.is_empty(),
        "not granted by rbac-dedicated.yaml: {denied:?}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_rollout_outlives_an_agent_killed_while_it_holds_a_claim() {
    let mut cluster = Cluster::start(2, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    let (most, watch) = unavailable_high_water(cluster.client.clone(), "app=web");
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    let node0 = cluster.nodes[0].name.clone();
    wait_rollout(&cluster, "web", Duration::from_secs(60), |r| {
        r["status"]["nodes"][node0.as_str()]["claims"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    })
    .await;
    cluster.kill_agent(0);
    // Without its agent, node 0's claim holds the budget: node 1 restarts nothing meanwhile
    // beyond it (budget 1).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(*most.lock().unwrap() <= 1);
    cluster.start_agent(0);
    ends_within_one_unavailable(cluster, &ids, most, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn pods_on_a_node_without_an_agent_are_reported_and_the_rest_goes_on() {
    let mut cluster = Cluster::start(2, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    cluster.kill_agent(1);
    let node1 = cluster.nodes[1].name.clone();
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 2}),
    )
    .await;
    let waiting = wait_rollout(&cluster, "web", Duration::from_secs(90), |r| {
        condition(r, "WaitingForNodes").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let message = condition(&waiting, "WaitingForNodes").unwrap()["message"].clone();
    assert_eq!(
        message,
        json!(format!("waiting for node {node1}: no agent (2 pods)"))
    );
    assert_eq!(waiting["status"]["phase"], "Progressing");
    assert_eq!(
        waiting["status"]["done"], 2,
        "node 0's pods went on: {:#}",
        waiting["status"]
    );
    // The agent comes back: it carries out its part and the rollout ends.
    cluster.start_agent(1);
    let done = wait_rollout(&cluster, "web", Duration::from_secs(90), |r| {
        phase(r) == "Succeeded"
    })
    .await;
    assert_eq!(
        condition(&done, "WaitingForNodes").map(|c| c["status"].clone()),
        Some(json!("False"))
    );
    assert_each_restarted_once(&cluster, &ids).await;
    cluster.stop().await;
}

/// `inplaced rollout pause|resume|cancel` as a user runs them: a paused rollout restarts
/// nothing, resumed it ends, and a cancelled one is gone with its requests' owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_user_pauses_resumes_and_cancels_a_rollout() {
    let cluster = Cluster::start(1, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    cluster
        .server
        .write_kubeconfig(kubeconfig.path(), None)
        .unwrap();
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .arg("rollout")
            .args(args)
            .args(["-n", NS, "--kubeconfig"])
            .arg(kubeconfig.path())
            .output()
            .unwrap();
        let text = format!(
            "exit {:?}\n{}{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    };
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "paused": true}),
    )
    .await;
    wait_rollout(&cluster, "web", Duration::from_secs(30), |r| {
        phase(r) == "Paused"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cluster.nodes[0].proxy.stop_counts().is_empty(),
        "paused: nothing restarted"
    );
    let (code, text) = cli(&["resume", "web"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cli(&["status", "web", "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("2 of 2 pods restarted in place"), "{text}");
    assert_each_restarted_once(&cluster, &ids).await;

    create_rollout(
        &cluster,
        "again",
        json!({"selector": {"matchLabels": {"app": "web"}}, "paused": true}),
    )
    .await;
    let (code, text) = cli(&["pause", "again"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cli(&["cancel", "again"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(rollout(&cluster, "again").is_null(), "deleted");
    let (code, text) = cli(&["status", "again"]);
    assert_eq!(code, Some(1), "{text}");
    let (code, text) = cli(&["status", "web", "--timeout", "never"]);
    assert_eq!(code, Some(2), "{text}");
    cluster.stop().await;
}

/// The API server away for a while mid-rollout, with a claim held (every connection dropped,
/// watches cut): the claim is not lost and no second one is made, and the rollout ends with
/// every pod restarted once, within its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_api_outage_mid_rollout_makes_no_claim_and_loses_none() {
    let cluster = Cluster::start(2, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    let (most, watch) = unavailable_high_water(cluster.client.clone(), "app=web");
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    wait_rollout(&cluster, "web", Duration::from_secs(60), |r| {
        r["status"]["inProgress"] == 1
    })
    .await;
    cluster.server.faults().outage(Duration::from_secs(6));
    tokio::time::sleep(Duration::from_secs(6)).await;
    ends_within_one_unavailable(cluster, &ids, most, watch).await;
}

/// A claim left by an agent that is gone for good (no Lease), on a pod that is ready and whose
/// request was never made, long ago: another agent releases it, and the budget it held goes to
/// that agent's own pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn another_agent_releases_the_claim_of_an_agent_gone_for_good() {
    let mut cluster = Cluster::start(2, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    cluster.kill_agent(1);
    let (node0, node1) = (cluster.nodes[0].name.clone(), cluster.nodes[1].name.clone());
    let orphan = ids
        .keys()
        .find(|name| cluster.pod(name).unwrap()["spec"]["nodeName"] == node1.as_str())
        .unwrap()
        .clone();
    let orphan_uid = cluster.pod(&orphan).unwrap()["metadata"]["uid"].clone();
    // Made paused, then given the gone agent's claim (two minutes old), then resumed.
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "paused": true}),
    )
    .await;
    let store = cluster.server.store();
    let mut object = rollout(&cluster, "web");
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = |t: k8s_openapi::jiff::Timestamp| {
        k8s_openapi::jiff::Timestamp::from_second(t.as_second())
            .unwrap()
            .to_string()
    };
    let long_ago = now - k8s_openapi::jiff::SignedDuration::from_secs(120);
    object["status"] = json!({
        "phase": "Paused",
        "startTime": seconds(now),
        "inProgress": 1,
        "nodes": {node1.as_str(): {
                   "claims": [{"pod": orphan, "podUID": orphan_uid, "since": seconds(long_ago)}]}},
    });
    store.replace(ROLLOUTS, object).unwrap();
    store
        .merge_patch(ROLLOUTS, NS, "web", json!({"spec": {"paused": false}}))
        .unwrap();
    let released = wait_rollout(&cluster, "web", Duration::from_secs(60), |r| {
        r["status"]["nodes"][node1.as_str()]["claims"]
            .as_array()
            .is_none_or(Vec::is_empty)
            && r["status"]["done"] == 2
    })
    .await;
    assert_eq!(
        released["status"]["phase"], "Progressing",
        "node 1's pods wait: {:#}",
        released["status"]
    );
    // The orphan's pod was not restarted by anyone.
    assert_eq!(cluster.nodes[1].proxy.stop_counts().len(), 0);
    // Node 1's pods are deleted: the leader's census has no pod of the rollout left there, so
    // the rollout ends.
    let on_node1: Vec<String> = ids
        .keys()
        .filter(|name| cluster.pod(name).unwrap()["spec"]["nodeName"] == node1.as_str())
        .cloned()
        .collect();
    for name in &on_node1 {
        store.delete("pods", NS, name).unwrap();
    }
    let ended = wait_rollout(&cluster, "web", Duration::from_secs(60), |r| {
        r["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(ended["status"]["done"], 2, "{:#}", ended["status"]);
    assert_eq!(ended["status"]["matched"], 2, "node 1's pods went unasked");
    let _ = node0;
    cluster.stop().await;
}

/// The agent that leads the rollout dies for good mid-rollout, and its node's pods go with it
/// (a node drained): once its leader Lease has lapsed another agent takes the lead, and the
/// rollout ends with each pod left restarted once, never more than the budget unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn the_rollout_ends_under_a_new_leader_when_the_leading_agent_dies() {
    const LEASES: &str = "leases.coordination.k8s.io";
    let mut cluster = Cluster::start(3, "v1.32.4").await;
    let ids = run_web_pods(&cluster, 2).await;
    let (most, watch) = unavailable_high_water(cluster.client.clone(), "app=web");
    create_rollout(
        &cluster,
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    wait_rollout(&cluster, "web", Duration::from_secs(60), |r| {
        r["status"]["done"].as_u64().is_some_and(|d| d >= 1)
    })
    .await;
    let holder = |cluster: &Cluster| {
        cluster
            .server
            .store()
            .get(LEASES, NS, inplaced::rollout::object::LEADER_LEASE)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    };
    let leader = holder(&cluster).expect("a leader holds the Lease");
    let index = cluster
        .nodes
        .iter()
        .position(|n| n.name == leader)
        .expect("the leader is an agent of the cluster");
    cluster.kill_agent(index);
    let on_leader: Vec<String> = ids
        .keys()
        .filter(|name| cluster.pod(name).unwrap()["spec"]["nodeName"] == leader.as_str())
        .cloned()
        .collect();
    for name in &on_leader {
        cluster.server.store().delete("pods", NS, name).unwrap();
    }
    let ended = wait_rollout(&cluster, "web", Duration::from_secs(150), |r| {
        phase(r) == "Succeeded"
    })
    .await;
    watch.abort();
    let successor = holder(&cluster).expect("a leader holds the Lease");
    assert_ne!(successor, leader, "another agent took the lead");
    let most = *most.lock().unwrap();
    assert!(most <= 1, "{most} pods unavailable at once, budget 1");
    let left: HashMap<String, String> = ids
        .iter()
        .filter(|(name, _)| !on_leader.contains(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(
        ended["status"]["done"].as_u64() >= Some(left.len() as u64),
        "{:#}",
        ended["status"]
    );
    assert_restarted_once_among(&cluster, &left, &ids).await;
    cluster.stop().await;
}
