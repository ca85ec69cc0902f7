//! ContainerRestartRollouts applied with kubectl across two real nodes (two kubelets, each on a
//! containerd of its own), carried out by their agents with the dedicated identity. How many
//! pods were unready at once is read from a watch of the real apiserver.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, NodeConfig, RealNode, wait_until};
use serde_json::{Value, json};
use support::agent::AgentProcess;
use support::real::*;

/// Two real nodes with `per_node` slow-ready pods `roll-<node>-<i>` each (label `app=roll`),
/// every one running and ready, and an agent on each node.
struct TwoNodes {
    cluster: ControlPlane,
    nodes: Vec<RealNode>,
    /// Each node's agent state directory, kept across a restart of its agent.
    state_dirs: Vec<tempfile::TempDir>,
    agents: Vec<Option<AgentProcess>>,
    pods: Api<Pod>,
    rollouts: Api<DynamicObject>,
    names: Vec<String>,
}

impl TwoNodes {
    async fn start(per_node: usize) -> TwoNodes {
        TwoNodes::start_with(ControlPlaneConfig::new(NEWEST), per_node).await
    }

    async fn start_with(config: ControlPlaneConfig, per_node: usize) -> TwoNodes {
        let cluster = ControlPlane::start(config).await.unwrap();
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
            for i in 0..per_node {
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
        let rollouts = Api::namespaced_with(
            client.clone(),
            NS,
            &inplaced_resource("ContainerRestartRollout", "containerrestartrollouts"),
        );
        let mut two = TwoNodes {
            cluster,
            state_dirs: (0..nodes.len())
                .map(|_| tempfile::tempdir().unwrap())
                .collect(),
            agents: nodes.iter().map(|_| None).collect(),
            nodes,
            pods,
            rollouts,
            names,
        };
        for i in 0..two.nodes.len() {
            two.start_agent(i);
        }
        two
    }

    /// (Re)starts node `i`'s agent, with its dedicated identity and its state directory.
    fn start_agent(&mut self, i: usize) {
        let node = &self.nodes[i];
        let kubeconfig: PathBuf = dedicated(&self.cluster, node);
        let state = self.state_dirs[i].path().to_str().unwrap().to_string();
        self.agents[i] = Some(agent_with(node, &kubeconfig, &["--state-dir", &state]));
    }

    /// Ends node `i`'s agent with SIGKILL: no shutdown of any kind, its claims stay.
    fn kill_agent(&mut self, i: usize) {
        if let Some(mut agent) = self.agents[i].take() {
            agent.signal(nix::sys::signal::Signal::SIGKILL);
            agent.wait_exit(Duration::from_secs(10));
        }
    }

    /// The rollout `roll` of every pod, budget `max_unavailable`, made with kubectl.
    fn create_rollout(&self, max_unavailable: u32) {
        kubectl_create(
            &self.cluster,
            "rollout",
            json!({
                "apiVersion": "inplaced.io/v1alpha1",
                "kind": "ContainerRestartRollout",
                "metadata": {"name": "roll", "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": "roll"}},
                         "maxUnavailable": max_unavailable},
            }),
        );
    }

    async fn rollout(&self) -> Value {
        self.rollouts.get("roll").await.unwrap().data
    }

    /// The rollout once `pred` holds for it.
    async fn rollout_when(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, WAIT, || {
            let rollouts = self.rollouts.clone();
            let held = |r: &Value| pred(r);
            async move {
                let r = rollouts.get("roll").await?.data;
                Ok(held(&r).then_some(r))
            }
        })
        .await
        .unwrap()
    }

    /// `inplaced rollout <verb> roll` as a user runs it, with the administrator's kubeconfig.
    fn rollout_command(&self, verb: &str) {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["rollout", verb, "roll", "-n", NS, "--kubeconfig"])
            .arg(self.cluster.admin_kubeconfig())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "inplaced rollout {verb}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Each pod's restart count, by name.
    async fn restarts(&self) -> Vec<(String, i32)> {
        let mut counts = Vec::new();
        for name in &self.names {
            counts.push((
                name.clone(),
                app_status(&self.pods.get(name).await.unwrap()).0,
            ));
        }
        counts
    }

    /// Every pod running, ready and restarted exactly once.
    async fn each_restarted_once(&self) {
        for name in &self.names {
            let pod = running(&self.pods, name).await;
            assert_eq!(app_status(&pod).0, 1, "{name} restarted exactly once");
        }
    }
}

fn claims(rollout: &Value) -> usize {
    rollout["status"]["nodes"]
        .as_object()
        .map(|parts| {
            parts
                .values()
                .map(|p| p["claims"].as_array().map_or(0, Vec::len))
                .sum()
        })
        .unwrap_or(0)
}

/// The most pods unready at once from now on, as a watch of the apiserver sees them.
fn watch_unready(two: &TwoNodes) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    support::most_unready(two.pods.clone(), "app=roll")
}

/// A ContainerRestartRollout applied with kubectl restarts all six pods once each, never more
/// than its budget of 2 unready at once as the apiserver saw it, and ends Succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_rollout_applied_with_kubectl_restarts_every_pod_across_two_real_nodes_within_its_budget()
{
    let two = TwoNodes::start(3).await;
    let (stop, most) = watch_unready(&two);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    two.create_rollout(2);
    let done = wait_phase(&two.rollouts, "roll", &["Succeeded", "Failed"]).await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let most = most.await.unwrap();
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert!(
        most <= 2,
        "{most} pods unready at once with maxUnavailable 2"
    );
    assert!(most >= 1, "the watch saw no restart");
    two.each_restarted_once().await;
    eprintln!(
        "6 pods on 2 real nodes, budget 2: {:.1} s, at most {most} unready at once",
        took.as_secs_f64()
    );
}

/// An agent killed (SIGKILL) while its node holds a claim: its claim keeps the budget while it
/// is away (the other node restarts nothing beyond it), and once it is back on the same state
/// directory the rollout ends with every pod restarted exactly once, never more than the budget
/// of 1 unready at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_rollout_outlives_an_agent_killed_while_it_holds_a_claim_on_a_real_node() {
    let mut two = TwoNodes::start(2).await;
    let (stop, most) = watch_unready(&two);
    tokio::time::sleep(Duration::from_millis(500)).await;
    two.create_rollout(1);
    let node = two.nodes[0].name.clone();
    two.rollout_when("node-1's agent holds a claim", |r| {
        r["status"]["nodes"][node.as_str()]["claims"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    })
    .await;
    two.kill_agent(0);
    let held = two.rollout().await;
    // Away for longer than a restart takes: the claim must hold the budget meanwhile.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let away = two.rollout().await;
    assert!(
        claims(&away) <= 1,
        "the budget of 1 held by the dead agent's claim: {:#}",
        away["status"]
    );
    assert!(
        away["status"]["nodes"][node.as_str()]["claims"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "the dead agent's claim stays while its Lease has not lapsed: {:#}\nbefore: {:#}",
        away["status"],
        held["status"]
    );
    two.start_agent(0);
    let done = wait_phase(&two.rollouts, "roll", &["Succeeded", "Failed"]).await;
    stop.store(true, Ordering::Relaxed);
    let most = most.await.unwrap();
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert_eq!(done.data["status"]["done"], 4, "{:#}", done.data["status"]);
    assert!(
        most <= 1,
        "{most} pods unready at once with maxUnavailable 1"
    );
    two.each_restarted_once().await;
}

/// `inplaced rollout pause` mid-rollout: the phase says Paused, what is under way finishes and
/// nothing more is restarted while paused; `inplaced rollout resume` carries it to the end, each
/// pod restarted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_paused_rollout_restarts_nothing_more_until_it_is_resumed() {
    let two = TwoNodes::start(3).await;
    two.create_rollout(1);
    two.rollout_when("a first pod restarted", |r| {
        r["status"]["done"].as_u64().is_some_and(|d| d >= 1)
    })
    .await;
    two.rollout_command("pause");
    let paused = two
        .rollout_when("paused, with nothing under way", |r| {
            r["status"]["phase"] == "Paused" && claims(r) == 0
        })
        .await;
    let done = paused["status"]["done"].as_u64().unwrap();
    assert!(done < 6, "paused before the end: {:#}", paused["status"]);
    let at_pause = two.restarts().await;
    let restarted = at_pause.iter().filter(|(_, n)| *n > 0).count() as u64;
    assert_eq!(restarted, done, "the status counts what the kubelets did");
    // Longer than several restarts take: none begins while paused.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        two.restarts().await,
        at_pause,
        "nothing restarted while paused"
    );
    let still = two.rollout().await;
    assert_eq!(still["status"]["phase"], "Paused");
    assert_eq!(claims(&still), 0, "{:#}", still["status"]);

    two.rollout_command("resume");
    let ended = wait_phase(&two.rollouts, "roll", &["Succeeded", "Failed"]).await;
    assert_eq!(
        ended.data["status"]["phase"], "Succeeded",
        "{:#}",
        ended.data
    );
    assert_eq!(ended.data["status"]["done"], 6);
    two.each_restarted_once().await;
}

/// A PodDisruptionBudget stricter than the rollout's budget: `minAvailable: 5` of the six pods
/// allows one disruption, the rollout allows all six; never more than one is unready at once
/// (the agents compute what the PDB allows), and every pod is restarted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_pod_disruption_budget_holds_a_rollout_to_what_it_allows() {
    let two = TwoNodes::start(3).await;
    kubectl_create(
        &two.cluster,
        "pdb",
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "roll", "namespace": NS},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "roll"}}},
        }),
    );
    let (stop, most) = watch_unready(&two);
    tokio::time::sleep(Duration::from_millis(500)).await;
    two.create_rollout(6);
    let done = wait_phase(&two.rollouts, "roll", &["Succeeded", "Failed"]).await;
    stop.store(true, Ordering::Relaxed);
    let most = most.await.unwrap();
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    assert_eq!(
        most, 1,
        "the PDB allows one pod unready at a time (the rollout six); the watch saw {most}"
    );
    two.each_restarted_once().await;
}

/// Desired minus available pods of `selector` over the apiserver's sequence of pod events, as
/// a Deployment counts them (ready and not being deleted): the most at once and the integral
/// over time (unavailable pod-seconds), from when it starts until `stop` is set.
fn watch_availability(
    pods: Api<Pod>,
    selector: &str,
    desired: usize,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<(usize, f64)>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let config = watcher::Config::default().labels(selector);
    let handle = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods, config));
        let mut available: std::collections::HashMap<String, bool> = Default::default();
        let (mut most, mut pod_seconds) = (0usize, 0.0f64);
        let mut since = Instant::now();
        let mut unavailable = 0usize;
        // Counted from the end of the first listing (before it, pods not yet listed would
        // count as unavailable).
        let mut listed = false;
        while !flag.load(Ordering::Relaxed) {
            let next = tokio::time::timeout(Duration::from_millis(100), events.next()).await;
            let now = Instant::now();
            pod_seconds += unavailable as f64 * (now - since).as_secs_f64();
            since = now;
            let Ok(Some(Ok(event))) = next else { continue };
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    let up = pod.metadata.deletion_timestamp.is_none() && support::pod_ready(&pod);
                    available.insert(pod.metadata.uid.clone().unwrap_or_default(), up);
                }
                watcher::Event::Delete(pod) => {
                    available.remove(&pod.metadata.uid.clone().unwrap_or_default());
                }
                watcher::Event::InitDone => listed = true,
                watcher::Event::Init => continue,
            }
            if !listed {
                continue;
            }
            let up = available.values().filter(|a| **a).count();
            unavailable = desired.saturating_sub(up);
            most = most.max(unavailable);
        }
        (most, pod_seconds)
    });
    (stop, handle)
}

/// The UID and restart count of the `app` container of each pod of `app=web`.
async fn web_pods(pods: &Api<Pod>) -> Vec<(String, i32)> {
    let list = pods
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let mut out: Vec<(String, i32)> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.uid.clone().unwrap_or_default(), app_status(p).0))
        .collect();
    out.sort();
    out
}

/// The same Deployment's six pods (over two real nodes, placed by the real scheduler) restarted
/// twice at the same budget of 2: in place by a ContainerRestartRollout, then by `kubectl
/// rollout restart` (new pods: scheduled, new sandboxes). Each keeps its budget as the
/// apiserver's pod events show; the wall time and unavailable pod-seconds of each are printed
/// for BENCHMARKS.md (`tests/run-all.sh --test real_kube_rollouts -- --nocapture
/// side_by_side`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn side_by_side_a_deployment_restarted_in_place_and_by_kubectl_rollout_restart() {
    const REPLICAS: usize = 6;
    let two = TwoNodes::start_with(ControlPlaneConfig::new(NEWEST).with_deployments(), 0).await;
    let mut template = slow_ready_pod("web", "", "web");
    let spec = template.spec.as_mut().unwrap();
    spec.node_name = None;
    // No CNI here: the nodes stay NotReady (tainted), which the host-network pods tolerate.
    spec.tolerations = Some(vec![
        serde_json::from_value(json!({"operator": "Exists"})).unwrap(),
    ]);
    spec.topology_spread_constraints = Some(vec![
        serde_json::from_value(json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}))
        .unwrap(),
    ]);
    kubectl_create(
        &two.cluster,
        "deployment",
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 0}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": template.spec},
            },
        }),
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(two.pods.clone().into_client(), NS);
    let settled = |deployments: Api<k8s_openapi::api::apps::v1::Deployment>| async move {
        wait_until("the Deployment settled", WAIT, || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("web").await?;
                let status = d.status.clone().unwrap_or_default();
                let settled = status.observed_generation >= d.metadata.generation
                    && status.updated_replicas == Some(REPLICAS as i32)
                    && status.available_replicas == Some(REPLICAS as i32)
                    && status.replicas == Some(REPLICAS as i32);
                Ok(settled.then_some(()))
            }
        })
        .await
        .unwrap()
    };
    settled(deployments.clone()).await;
    let before = web_pods(&two.pods).await;
    let nodes: std::collections::HashSet<String> = two
        .pods
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();

    // In place.
    let (stop, figures) = watch_availability(two.pods.clone(), "app=web", REPLICAS);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    kubectl_create(
        &two.cluster,
        "rollout",
        json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerRestartRollout",
            "metadata": {"name": "roll", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 2},
        }),
    );
    let done = wait_phase(&two.rollouts, "roll", &["Succeeded", "Failed"]).await;
    wait_until("every pod ready again", WAIT, || {
        let pods = two.pods.clone();
        async move {
            let list = pods
                .list(&kube::api::ListParams::default().labels("app=web"))
                .await?;
            Ok(list.items.iter().all(support::pod_ready).then_some(()))
        }
    })
    .await
    .unwrap();
    let in_place = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (in_place_most, in_place_seconds) = figures.await.unwrap();
    assert_eq!(done.data["status"]["phase"], "Succeeded", "{:#}", done.data);
    let after: Vec<(String, i32)> = web_pods(&two.pods).await;
    let same_pods: Vec<&String> = after.iter().map(|(uid, _)| uid).collect();
    assert_eq!(
        same_pods,
        before.iter().map(|(uid, _)| uid).collect::<Vec<_>>(),
        "the same pods"
    );
    assert!(
        after.iter().all(|(_, restarts)| *restarts == 1),
        "each restarted once: {after:?}"
    );
    assert!(in_place_most <= 2, "{in_place_most} unavailable at once");

    // By kubectl: new pods.
    let (stop, figures) = watch_availability(two.pods.clone(), "app=web", REPLICAS);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    kubectl(
        &two.cluster,
        &["rollout", "restart", "deployment/web", "-n", NS],
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    settled(deployments.clone()).await;
    let replaced = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (replaced_most, replaced_seconds) = figures.await.unwrap();
    let renewed = web_pods(&two.pods).await;
    assert!(
        renewed
            .iter()
            .all(|(uid, _)| !before.iter().any(|(old, _)| old == uid)),
        "every pod replaced"
    );
    assert!(replaced_most <= 2, "{replaced_most} unavailable at once");
    eprintln!(
        "side by side, {REPLICAS} pods of a Deployment on {} real nodes, budget 2 (kube {}):\n  \
         ContainerRestartRollout (in place): {:.1} s, {:.1} unavailable pod-seconds, at most {in_place_most} unavailable\n  \
         kubectl rollout restart (new pods): {:.1} s, {:.1} unavailable pod-seconds, at most {replaced_most} unavailable",
        nodes.len(),
        two.cluster.version(),
        in_place.as_secs_f64(),
        in_place_seconds,
        replaced.as_secs_f64(),
        replaced_seconds,
    );
}
