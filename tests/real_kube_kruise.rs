//! The agent as the node half of the real kruise-manager v1.9.0, with no kruise-daemon:
//! ContainerRecreateRequests and CloneSet in-place updates on a real kubelet.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{NEWEST, RealNode, wait_until};
use serde_json::{Value, json};
use support::real::*;

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
