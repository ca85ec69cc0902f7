//! A ContainerRestartRollout at fleet scale (issue 51): NODES agents' rollout loops (the agent's
//! own code, `inplaced::rollout::run`, each with its own client and identity) in one process,
//! against one API server double under the shipped admission policies, PODS pods per node,
//! maxUnavailable 10 %. Each node's kubelet and restart-request loop are simulated: a request
//! made for a pod makes the pod unready at once (the worst case), and ready again RESTART later,
//! when the request is marked Succeeded. The simulation is the only writer of readiness, so the
//! most pods unready at once is the exact high-water mark of the API's history.
//!
//!     cargo bench -p inplaced --bench rollout_scale [-- NODES [PODS [RESTART_MS]]]
//!
//! Defaults: 100 nodes, 10 pods each, 300 ms per restart. Prints the budget and the most pods
//! unready at once, API requests per restarted pod (by verb and resource), status conflicts per
//! claim, and the wall time against the ideal (pods / budget × one restart).

#[path = "../tests/support/measure.rs"]
#[allow(dead_code)] // only its argument reader is used here
mod measure;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, ServerConfig};
use inplaced::health::Health;
use inplaced::kube::CachedPod;
use inplaced::metrics::Metrics;
use inplaced::nodeview::{NodeView, PodView};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tokio::sync::watch;

const NS: &str = "fleet";
const REQUESTS: &str = "containerrestartrequests.inplaced.io";
const ROLLOUTS: &str = "containerrestartrollouts.inplaced.io";

fn ready_status(ready: bool) -> Value {
    let value = if ready { "True" } else { "False" };
    json!({"phase": "Running", "conditions": [
        {"type": "Ready", "status": value, "lastTransitionTime": "2026-11-29T08:00:00Z"}]})
}

/// The node's pods as the agent's node view shows them.
fn view_of(server: &ApiServer, node: &str) -> NodeView {
    let pods = server
        .store()
        .list("pods", NS)
        .into_iter()
        .filter(|p| p["spec"]["nodeName"] == node)
        .filter_map(|pod| {
            let ready = pod["status"]["conditions"][0]["status"] == "True";
            let cached: CachedPod = serde_json::from_value(pod.clone()).ok()?;
            Some(PodView {
                namespace: NS.into(),
                name: pod["metadata"]["name"].as_str()?.into(),
                uid: pod["metadata"]["uid"].as_str()?.into(),
                runtime_uid: pod["metadata"]["uid"].as_str()?.into(),
                static_pod: false,
                terminating: false,
                pod_ip: None,
                sandbox_id: None,
                sandbox_ready: true,
                ready_since: ready.then(|| "2026-11-29T08:00:00Z".to_string()),
                containers: Vec::new(),
                api_pod: Some(Arc::new(cached)),
            })
        })
        .collect();
    NodeView {
        node_name: node.into(),
        synced: true,
        pods,
        ..Default::default()
    }
}

fn apply_shipped_policy(server: &ApiServer) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/kubernetes/admission-policy.yaml"
    ))
    .expect("the shipped policy");
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc = Value::deserialize(doc).expect("YAML");
        let resource = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => apiserver_double::VALIDATING_ADMISSION_POLICIES,
            _ => apiserver_double::VALIDATING_ADMISSION_POLICY_BINDINGS,
        };
        server.store().create(resource, doc).expect("stored");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = measure::numeric_args();
    let nodes = args.first().copied().unwrap_or(100) as usize;
    let per_node = args.get(1).copied().unwrap_or(10) as usize;
    let restart = Duration::from_millis(args.get(2).copied().unwrap_or(300));
    let total = nodes * per_node;
    let budget = (total / 10).max(1);

    let server = Arc::new(
        ApiServer::start(ServerConfig::default())
            .await
            .expect("the API double"),
    );
    apply_shipped_policy(&server);
    let names: Vec<String> = (0..nodes).map(|n| format!("node-{n:03}")).collect();
    for node in &names {
        for p in 0..per_node {
            let pod = server
                .store()
                .create(
                    "pods",
                    json!({"metadata": {"name": format!("web-{node}-{p:02}"), "namespace": NS,
                                        "labels": {"app": "web"}},
                           "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}}),
                )
                .expect("a pod");
            let mut pod = pod;
            pod["status"] = ready_status(true);
            server.store().replace("pods", pod).expect("ready");
        }
    }

    let (shutdown_tx, shutdown) = watch::channel(false);
    let unready_now = Arc::new(AtomicUsize::new(0));
    let most_unready = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for node in &names {
        let token = format!("agent-{node}");
        server.tokens().add_with_groups(
            &token,
            &format!("inplaced:node:{node}"),
            &["inplaced:agents"],
            None,
        );
        let client = node_sandbox::util::kube_client(&server.kubeconfig(Some(&token)))
            .await
            .expect("a client");
        let (views_tx, views) = watch::channel(Arc::new(view_of(&server, node)));
        let health = Health::new(Default::default());
        tasks.push(tokio::spawn(inplaced::rollout::run(
            node.clone(),
            client,
            views,
            health,
            Metrics::new(),
            shutdown.clone(),
        )));
        // This node's kubelet and restart-request loop.
        let server = server.clone();
        let node = node.clone();
        let (now, most) = (unready_now.clone(), most_unready.clone());
        let mut stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let objects = server.store();
            let mut under_way: BTreeMap<String, (Instant, String)> = BTreeMap::new();
            loop {
                let mut changed = false;
                for request in objects.list(REQUESTS, NS) {
                    let name = request["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if request["metadata"]["labels"]["inplaced.io/node-name"] != node.as_str()
                        || request["status"]["phase"].is_string()
                        || under_way.contains_key(&name)
                    {
                        continue;
                    }
                    let pod_name = request["spec"]["podName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if let Some(mut pod) = objects.get("pods", NS, &pod_name) {
                        pod["status"] = ready_status(false);
                        let _ = objects.replace("pods", pod);
                        let unready = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(unready, Ordering::SeqCst);
                    }
                    let mut request = request;
                    request["status"] = json!({"phase": "Restarting"});
                    let _ = objects.replace(REQUESTS, request);
                    under_way.insert(name, (Instant::now(), pod_name));
                    changed = true;
                }
                let finished: Vec<String> = under_way
                    .iter()
                    .filter(|(_, (since, _))| since.elapsed() >= restart)
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in finished {
                    let Some((_, pod_name)) = under_way.remove(&name) else {
                        continue;
                    };
                    if let Some(mut pod) = objects.get("pods", NS, &pod_name) {
                        pod["status"] = ready_status(true);
                        let _ = objects.replace("pods", pod);
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                    if let Some(mut request) = objects.get(REQUESTS, NS, &name) {
                        request["status"] = json!({"phase": "Succeeded"});
                        let _ = objects.replace(REQUESTS, request);
                    }
                    changed = true;
                }
                if changed {
                    let _ = views_tx.send(Arc::new(view_of(&server, &node)));
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.changed() => break,
                }
            }
        }));
    }
    // Every agent's watch is up before the rollout is made.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.audit().clear();
    let started = Instant::now();
    server
        .store()
        .create(
            ROLLOUTS,
            json!({"apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerRestartRollout",
                   "metadata": {"name": "web", "namespace": NS},
                   "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": "10%"}}),
        )
        .expect("the rollout");
    let deadline = started + Duration::from_secs(1800);
    let done = loop {
        let rollout = server.store().get(ROLLOUTS, NS, "web").unwrap_or_default();
        let phase = rollout["status"]["phase"].as_str().unwrap_or("").to_owned();
        if phase == "Succeeded" || phase == "Failed" || Instant::now() > deadline {
            break rollout;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = started.elapsed();
    let _ = shutdown_tx.send(true);
    let entries = server.audit().resource_entries();
    let agents: Vec<_> = entries
        .iter()
        .filter(|e| e.request.user.starts_with("inplaced:node:"))
        .collect();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for e in &agents {
        let sub = if e.request.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", e.request.subresource)
        };
        *by_kind
            .entry(format!("{} {}{sub}", e.request.verb, e.request.resource))
            .or_default() += 1;
    }
    let conflicts = agents
        .iter()
        .filter(|e| e.request.resource == "containerrestartrollouts" && e.code == 409)
        .count();
    let status = &done["status"];
    let restarted = status["done"].as_u64().unwrap_or(0) as usize;
    let ideal = restart.as_secs_f64() * (total as f64 / budget as f64).ceil();
    println!(
        "rollout_scale: {nodes} nodes × {per_node} pods = {total}, maxUnavailable 10% = {budget}, restart {restart:?}"
    );
    println!(
        "  phase {}, {restarted} of {total} restarted, {} failed",
        status["phase"], status["failed"]
    );
    println!(
        "  most pods unready at once: {} (budget {budget})",
        most_unready.load(Ordering::SeqCst)
    );
    println!(
        "  wall time {:.1} s; ideal {ideal:.1} s (pods / budget × one restart); {:.1}×",
        took.as_secs_f64(),
        took.as_secs_f64() / ideal
    );
    println!(
        "  agents' API requests: {} in all, {:.1} per restarted pod",
        agents.len(),
        agents.len() as f64 / restarted.max(1) as f64
    );
    for (kind, count) in &by_kind {
        println!(
            "    {kind:<45} {count:>7}  {:>6.2}/pod",
            *count as f64 / restarted.max(1) as f64
        );
    }
    println!(
        "  status conflicts (409): {conflicts}, {:.2} per claim",
        conflicts as f64 / restarted.max(1) as f64
    );
    assert!(
        most_unready.load(Ordering::SeqCst) <= budget,
        "the budget was exceeded"
    );
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}
