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

/// The test image (tests/node/containerd.sh) and its v2: the same busybox plus a layer with
/// `/etc/inplaced-test-image` = "v2", so another image ID.
const TEST_IMAGE: &str = "localhost/busybox:local";
const TEST_IMAGE_V2: &str = "localhost/busybox:local-v2";

/// The CloneSet's pods, by name.
async fn cloneset_pods(pods: &Api<Pod>) -> Vec<(String, Pod)> {
    let selector = kube::api::ListParams::default().labels("app=web");
    let mut by_name: Vec<(String, Pod)> = pods
        .list(&selector)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap(), p))
        .collect();
    by_name.sort_by(|a, b| a.0.cmp(&b.0));
    by_name
}

/// The CloneSet `web` of `replicas` pods on `node`: InPlaceIfPossible, its container running
/// `image`, with env `VERSION` read from the pod's label `version`.
fn cloneset(node: &str, replicas: u32, version: &str, image: &str) -> Value {
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
                        "image": image,
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
    kubectl_create(
        &cluster,
        "cloneset",
        cloneset(&node.name, 2, "1", TEST_IMAGE),
    );
    cloneset_settled(&clonesets, 2)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    let before = cloneset_pods(&pods).await;
    for (_, pod) in &before {
        assert_eq!(container_env(&node, pod, "VERSION").await, "1");
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
    let after = cloneset_pods(&pods).await;
    assert_eq!(after.len(), before.len());
    for ((name, old), (_, new)) in before.iter().zip(&after) {
        assert_eq!(new.metadata.uid, old.metadata.uid, "{name} kept its UID");
        assert_eq!(
            app_status(new).0,
            app_status(old).0 + 1,
            "{name}'s container restarted once"
        );
        assert_eq!(
            container_env(&node, new, "VERSION").await,
            "2",
            "{name} sees the new label"
        );
    }
}

/// The pod status of container `app`: its `image` and `imageID`.
fn app_image(pod: &Pod) -> (String, String) {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app"))
        .expect("app's status");
    (status.image.clone(), status.image_id.clone())
}

/// Every name the runtime knows the image `name` by: its ID and its repo digests (the kubelet
/// reports one of them as a container's `imageID`).
async fn image_ids(node: &RealNode, name: &str) -> Vec<String> {
    let image = runtime_of(node)
        .image_status(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{name} is not in node {}'s containerd", node.name));
    std::iter::once(image.id)
        .chain(image.repo_digests)
        .collect()
}

/// What the runtime says of the container `app` of `pod`: the image it runs (`image_ref`), its
/// kubelet hash annotation, and the content of `/etc/inplaced-test-image` in it ("" when absent).
async fn runtime_app(node: &RealNode, pod: &Pod) -> (String, String, String) {
    let (_, id) = app_status(pod);
    let id = id.rsplit("://").next().unwrap().to_string();
    let cri = runtime_of(node);
    let status = cri
        .container_status(&id, false)
        .await
        .unwrap()
        .status
        .expect("the container's status");
    let hash = status
        .annotations
        .get("io.kubernetes.container.hash")
        .cloned()
        .unwrap_or_default();
    let answer = cri
        .exec_sync(
            &id,
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "cat /etc/inplaced-test-image 2>/dev/null || true".into(),
            ],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let file = String::from_utf8_lossy(&answer.stdout).trim().to_string();
    (status.image_ref, hash, file)
}

/// A CloneSet InPlaceIfPossible update of its container's image (to the test image's v2, another
/// image ID) under the real kruise-manager: kruise patches each pod's image, the real kubelet
/// restarts the container with it, and kruise's own status ends updated and ready (kruise 1.9
/// calls the update done when runtime-containers-meta, which the agent writes, matches the new
/// container and spec, or else when the container's imageID changed). The pods keep their UIDs,
/// each container restarted exactly once (the agent, there for the env from metadata, must not
/// add a restart of its own), and runs the new image, as the pod status and the runtime say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_cloneset_in_place_image_update_ends_updated_and_ready_under_the_real_kruise() {
    let OneNode {
        cluster,
        node,
        client,
        pods,
    } = one_node(NEWEST, "rbac-node-bound.yaml", "node-i", true).await;
    let kruise = real_cluster::KruiseManager::start(&cluster, &[])
        .await
        .unwrap();
    let _agent = agent_for(&node, node.kubelet_kubeconfig());
    let clonesets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &cloneset_resource());
    kubectl_create(
        &cluster,
        "cloneset",
        cloneset(&node.name, 2, "1", TEST_IMAGE),
    );
    cloneset_settled(&clonesets, 2)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nkruise-manager's log ends:\n{}", kruise.log_tail(20)));
    let old_ids = image_ids(&node, TEST_IMAGE).await;
    let new_ids = image_ids(&node, TEST_IMAGE_V2).await;
    assert!(
        old_ids.iter().all(|id| !new_ids.contains(id)),
        "the two test images must differ: {old_ids:?} {new_ids:?}"
    );
    let before = cloneset_pods(&pods).await;
    assert_eq!(before.len(), 2);
    for (name, pod) in &before {
        let (_, image_id) = app_image(pod);
        assert!(old_ids.contains(&image_id), "{name} runs {image_id}");
        let (image_ref, _, file) = runtime_app(&node, pod).await;
        assert!(old_ids.contains(&image_ref), "{name} runs {image_ref}");
        assert_eq!(file, "", "{name}: the first image has no v2 file");
    }

    // A JSON patch of the image alone: a merge patch would replace the whole containers list
    // (a CRD has no strategic merge), and kruise would recreate the pods for the lost fields.
    let template_image = json!([{"op": "replace",
        "path": "/spec/template/spec/containers/0/image", "value": TEST_IMAGE_V2}]);
    clonesets
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(serde_json::from_value(template_image).unwrap()),
        )
        .await
        .unwrap();
    if let Err(e) = cloneset_settled(&clonesets, 2).await {
        // What kruise decides on: each pod's annotations, conditions and container statuses.
        let pods: Vec<Value> = cloneset_pods(&pods)
            .await
            .into_iter()
            .map(|(_, p)| json!({"annotations": p.metadata.annotations, "status": p.status}))
            .collect();
        panic!(
            "{e:#}\nthe pods: {:#}\nkruise-manager's log ends:\n{}",
            json!(pods),
            kruise.log_tail(20)
        );
    }
    let after = cloneset_pods(&pods).await;
    assert_eq!(after.len(), before.len());
    for ((name, old), (_, new)) in before.iter().zip(&after) {
        assert_eq!(new.metadata.uid, old.metadata.uid, "{name} kept its UID");
        assert_eq!(
            app_status(new).0,
            app_status(old).0 + 1,
            "{name}'s container restarted once"
        );
        let (image, image_id) = app_image(new);
        assert_eq!(image, TEST_IMAGE_V2, "{name}'s status image");
        assert!(
            new_ids.contains(&image_id),
            "{name}'s status imageID {image_id}"
        );
        let (image_ref, hash, file) = runtime_app(&node, new).await;
        assert!(new_ids.contains(&image_ref), "{name} runs {image_ref}");
        assert_eq!(file, "v2", "{name} runs the v2 image's content");
        // The agent's runtime-containers-meta names the new container with the kubelet's hash
        // of it: what kruise reads first. It may follow kruise's status by a moment.
        let (_, container_id) = app_status(new);
        let meta = wait_until(&format!("{name}'s runtime-containers-meta"), WAIT, || {
            let pods = pods.clone();
            let name = name.clone();
            let container_id = container_id.clone();
            async move {
                let pod = pods.get(&name).await?;
                let meta: Value = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("apps.kruise.io/runtime-containers-meta"))
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or(Value::Null);
                let app = meta["containers"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["name"] == "app"))
                    .cloned();
                Ok(app.filter(|a| a["containerID"] == container_id.as_str()))
            }
        })
        .await
        .unwrap();
        assert_eq!(meta["restartCount"], json!(app_status(new).0), "{meta}");
        assert_eq!(
            meta["hashes"]["plainHash"].as_u64(),
            u64::from_str_radix(&hash, 16).ok(),
            "{name}: the meta's plainHash is the kubelet's {hash:?}: {meta}"
        );
    }
    // No second restart follows (the agent's env check sees the same label values).
    tokio::time::sleep(Duration::from_secs(5)).await;
    for ((name, old), (_, new)) in before.iter().zip(&cloneset_pods(&pods).await) {
        assert_eq!(
            app_status(new).0,
            app_status(old).0 + 1,
            "{name} restarted again"
        );
    }
}
