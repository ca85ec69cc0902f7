//! A ContainerRestartRollout at fleet scale (issue 51): NODES agents' rollout loops (the agent's
//! own code, `inplaced::rollout::run`, each with its own client and identity) in one process,
//! against one API server double under the shipped admission policies, PODS pods per node,
//! maxUnavailable 10 %. The nodes' kubelets and restart-request loops are simulated (one task,
//! writing to the double's store directly, so that it costs the API nothing): a request made for
//! a pod makes the pod unready at once (the worst case), and ready again RESTART later, when the
//! request is marked Succeeded. The simulation is the only writer of readiness, so the most pods
//! unready at once is the exact high-water mark of the API's history.
//!
//!     cargo bench -p inplaced --bench rollout_scale [-- NODES [PODS [RESTART_MS [LIMIT_S [KILL_LEADER_S]]]]]
//!
//! Defaults: 100 nodes, 10 pods each, 300 ms per restart, stopped after 1800 s (the figures are
//! then of the part done). With KILL_LEADER_S, the agent leading the rollout dies that many
//! seconds in and its node's pods are deleted with it (a node drained): another agent must take
//! the lead once its Lease has lapsed. Progress every 10 s. Prints the budget and the most pods
//! unready at once, the most claims held at once, API requests per restarted pod (by verb and
//! resource) and per second, status conflicts per claim, and the wall time against the ideal
//! (pods / budget × one restart).

#[path = "../tests/support/measure.rs"]
#[allow(dead_code)] // only its argument reader is used here
mod measure;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, ServerConfig};
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};
use inplaced::health::Health;
use inplaced::kube::CachedPod;
use inplaced::metrics::Metrics;
use inplaced::nodeview::{NodeView, PodView};
use inplaced::requests::Context;
use inplaced::rollout::RolloutConfig;
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

/// The pods of `nodes` as each node's agent view shows them (one listing for all).
fn views_by_node(server: &ApiServer, nodes: &[String]) -> BTreeMap<String, NodeView> {
    let mut views: BTreeMap<String, NodeView> = nodes
        .iter()
        .map(|node| {
            let view = NodeView {
                node_name: node.clone(),
                synced: true,
                ..Default::default()
            };
            (node.clone(), view)
        })
        .collect();
    for pod in server.store().list("pods", NS) {
        let Some(view) = pod["spec"]["nodeName"]
            .as_str()
            .and_then(|n| views.get_mut(n))
        else {
            continue;
        };
        let ready = pod["status"]["conditions"][0]["status"] == "True";
        let (Some(name), Some(uid)) = (
            pod["metadata"]["name"].as_str(),
            pod["metadata"]["uid"].as_str(),
        ) else {
            continue;
        };
        let (name, uid) = (name.to_owned(), uid.to_owned());
        let Ok(cached) = serde_json::from_value::<CachedPod>(pod) else {
            continue;
        };
        view.pods.push(PodView {
            namespace: NS.into(),
            name,
            runtime_uid: uid.clone(),
            uid,
            static_pod: false,
            terminating: false,
            pod_ip: None,
            sandbox_id: None,
            sandbox_ready: true,
            ready_since: ready.then(|| "2026-11-29T08:00:00Z".to_string()),
            containers: Vec::new(),
            api_pod: Some(Arc::new(cached)),
        });
    }
    views
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
    let limit = Duration::from_secs(args.get(3).copied().unwrap_or(1800));
    let kill_leader_at = args.get(4).copied().map(Duration::from_secs);
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
    let mut tasks = BTreeMap::new();
    let mut views = BTreeMap::new();
    let all_views = views_by_node(&server, &names);
    // The rollout stops nothing itself (it asks through ContainerRestartRequests): its runtime
    // client is never called, and connects lazily, so no runtime is needed.
    let unused_runtime = CriClient::new(CriConfig::new(
        CriEndpoint::parse("unix:///nonexistent/inplaced-bench.sock").expect("an endpoint"),
    ));
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
        let view = all_views.get(node).cloned().unwrap_or_default();
        let (views_tx, views_rx) = watch::channel(Arc::new(view));
        views.insert(node.clone(), views_tx);
        let ctx = Context {
            client,
            cri: unused_runtime.clone(),
            views: views_rx,
            health: Health::new(Default::default()),
            metrics: Metrics::new(),
            shutdown: shutdown.clone(),
        };
        let config = RolloutConfig {
            node_name: node.clone(),
        };
        tasks.insert(
            node.clone(),
            tokio::spawn(inplaced::rollout::run(ctx, config)),
        );
    }
    // Every node's kubelet and restart-request loop, in one task: it reads the requests every
    // 50 ms, makes a requested pod unready at once, and ready again (its request Succeeded)
    // RESTART later; the node views of the nodes that changed follow.
    let most_unready = Arc::new(AtomicUsize::new(0));
    let simulation = {
        let server = server.clone();
        let most = most_unready.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let objects = server.store();
            let mut under_way: BTreeMap<String, (Instant, String)> = BTreeMap::new();
            let mut unready = 0usize;
            loop {
                let mut changed = std::collections::BTreeSet::new();
                for request in objects.list(REQUESTS, NS) {
                    let name = request["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if request["status"]["phase"].is_string() || under_way.contains_key(&name) {
                        continue;
                    }
                    let pod_name = request["spec"]["podName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if let Some(mut pod) = objects.get("pods", NS, &pod_name) {
                        changed.insert(
                            pod["spec"]["nodeName"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        );
                        pod["status"] = ready_status(false);
                        let _ = objects.replace("pods", pod);
                        unready += 1;
                        most.fetch_max(unready, Ordering::SeqCst);
                    }
                    let mut request = request;
                    request["status"] = json!({"phase": "Restarting"});
                    let _ = objects.replace(REQUESTS, request);
                    under_way.insert(name, (Instant::now(), pod_name));
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
                        changed.insert(
                            pod["spec"]["nodeName"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        );
                        pod["status"] = ready_status(true);
                        let _ = objects.replace("pods", pod);
                        unready -= 1;
                    }
                    if let Some(mut request) = objects.get(REQUESTS, NS, &name) {
                        request["status"] = json!({"phase": "Succeeded"});
                        let _ = objects.replace(REQUESTS, request);
                    }
                }
                if !changed.is_empty() {
                    let changed: Vec<String> = changed.into_iter().collect();
                    let fresh = views_by_node(&server, &changed);
                    for (node, view) in fresh {
                        if let Some(tx) = views.get(&node) {
                            let _ = tx.send(Arc::new(view));
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.changed() => break,
                }
            }
        })
    };
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
    let deadline = started + limit;
    let mut said = Instant::now();
    // What every landed write of it sends to every agent's watch.
    let mut largest = 0usize;
    let mut most_claims = 0u64;
    let mut killed: Option<(String, Instant)> = None;
    let done = loop {
        let rollout = server.store().get(ROLLOUTS, NS, "web").unwrap_or_default();
        largest = largest.max(rollout.to_string().len());
        most_claims = most_claims.max(rollout["status"]["inProgress"].as_u64().unwrap_or(0));
        if killed.is_none() && kill_leader_at.is_some_and(|at| started.elapsed() >= at) {
            killed = kill_leader(&server, &mut tasks).map(|node| (node, Instant::now()));
        }
        let phase = rollout["status"]["phase"].as_str().unwrap_or("").to_owned();
        if phase == "Succeeded" || phase == "Failed" || Instant::now() > deadline {
            break rollout;
        }
        if said.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "  {:>5.0} s: {} restarted, {} under way",
                started.elapsed().as_secs_f64(),
                rollout["status"]["done"],
                rollout["status"]["inProgress"]
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = started.elapsed();
    let _ = shutdown_tx.send(true);
    let leader_now = leader(&server);
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
    println!("  most claims held at once: {most_claims} (budget {budget})");
    println!("  the rollout object at its largest: {largest} bytes");
    if let Some((node, at)) = &killed {
        println!(
            "  the leader {node} died {:.1} s in (its pods deleted); the lead is now {:?}; the rollout ended {:.1} s after the death",
            (*at - started).as_secs_f64(),
            leader_now,
            at.elapsed().as_secs_f64()
        );
    }
    println!(
        "  wall time {:.1} s; ideal {ideal:.1} s (pods / budget × one restart); {:.1}×",
        took.as_secs_f64(),
        took.as_secs_f64() / ideal
    );
    println!(
        "  agents' API requests: {} in all, {:.1} per restarted pod, {:.1} per second",
        agents.len(),
        agents.len() as f64 / restarted.max(1) as f64,
        agents.len() as f64 / took.as_secs_f64()
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
    let _ = tokio::time::timeout(Duration::from_secs(5), simulation).await;
    for task in tasks.into_values() {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}

/// The node whose agent holds the namespace's leader Lease.
fn leader(server: &ApiServer) -> Option<String> {
    server
        .store()
        .get(
            "leases.coordination.k8s.io",
            NS,
            inplaced::rollout::object::LEADER_LEASE,
        )
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

/// The leading agent dies, and its node's pods are deleted (a node drained with it): returns
/// its node.
fn kill_leader(
    server: &ApiServer,
    tasks: &mut BTreeMap<String, tokio::task::JoinHandle<()>>,
) -> Option<String> {
    let node = leader(server)?;
    tasks.remove(&node)?.abort();
    for pod in server.store().list("pods", NS) {
        if pod["spec"]["nodeName"] == node.as_str()
            && let Some(name) = pod["metadata"]["name"].as_str()
        {
            let _ = server.store().delete("pods", NS, name);
        }
    }
    Some(node)
}
