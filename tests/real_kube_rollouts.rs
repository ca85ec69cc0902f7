//! ContainerRestartRollouts applied with kubectl across two real nodes (two kubelets, each on a
//! containerd of its own), carried out by their agents.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, NodeConfig, RealNode};
use serde_json::json;
use support::agent::AgentProcess;
use support::real::*;

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
