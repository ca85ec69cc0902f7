//! Runtime container meta and env-from-metadata restarts end to end: the agent against the
//! kubelet stand-in, the API double and real containerd. The annotation's plain hashes must be
//! the golden Go hashes of the stand-in's release; restarts are counted by the CRI proxy.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::sandbox::{Node, NodeOptions, container_id, container_status, tag_test_image};
use support::unique;

const LONG: Duration = Duration::from_secs(60);
const META: &str = "apps.kruise.io/runtime-containers-meta";
const OPT_IN: &str = "inplaced.io/runtime-containers-meta";
const GOLDEN_TAG: &str = "real-busybox-init-apiserver-defaulted";

/// Exits promptly on SIGTERM, as a well-behaved application does.
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

fn busybox(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "localhost/busybox:local", "command": ["/bin/sh", "-c", script]})
}

fn env_from(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

fn annotation(pod: &Value) -> Option<String> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(META))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn hex(h: &Value) -> u64 {
    h.as_str()
        .map_or(0, |h| u64::from_str_radix(h, 16).unwrap())
}

/// The expected extracted-env hash of a spec container in `pod`, from inplaced's hasher
/// (itself checked against kruise's vectors).
fn expected_env_hash(pod: &Value, container: &str) -> u64 {
    let spec = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == container)
        .unwrap();
    let map = |v: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    inplaced::hashing::extracted_env_from_metadata_hash(
        &serde_json::to_vec(spec).unwrap(),
        &map(&pod["metadata"]["labels"]),
        &map(&pod["metadata"]["annotations"]),
    )
    .unwrap()
}

/// The annotation is exactly kruise's for the pod's status order, IDs, restart counts and hashes.
fn assert_annotation_matches(pod: &Value, release: &str) {
    let golden = support::golden::row(release, GOLDEN_TAG);
    let text = annotation(pod).expect("annotation written");
    let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
    let mut entries = Vec::new();
    for status in statuses {
        let name = status["name"].as_str().unwrap();
        let (plain, without) = if name == "init-myservice" {
            (hex(&golden["hash"]), hex(&golden["hash_without_resources"]))
        } else {
            (0, 0) // not golden: checked against the runtime below
        };
        entries.push((name.to_string(), plain, without));
    }
    let parsed: Value = serde_json::from_str(&text).unwrap();
    let containers = parsed["containers"].as_array().unwrap();
    assert_eq!(containers.len(), statuses.len(), "{text}");
    for (entry, (name, plain, without)) in containers.iter().zip(&entries) {
        assert_eq!(entry["name"], name.as_str(), "status order: {text}");
        let status = container_status(pod, name);
        assert_eq!(entry["containerID"], status["containerID"], "{text}");
        assert_eq!(entry["restartCount"], status["restartCount"], "{text}");
        if *plain != 0 {
            assert_eq!(entry["hashes"]["plainHash"], *plain, "golden hash: {text}");
            assert_eq!(
                entry["hashes"]["plainHashWithoutResources"], *without,
                "golden hash without resources (0 when the release writes none): {text}"
            );
        }
        assert_eq!(
            entry["hashes"]["extractedEnvFromMetadataHash"],
            expected_env_hash(pod, name),
            "{text}"
        );
    }
    // Byte for byte what Go writes for that content: compact, kruise's field order.
    let rebuilt: Vec<String> = containers
        .iter()
        .map(|c| {
            format!(
                r#"{{"name":"{}","containerID":"{}","restartCount":{},"hashes":{{"plainHash":{},"plainHashWithoutResources":{},"extractedEnvFromMetadataHash":{}}}}}"#,
                c["name"].as_str().unwrap(),
                c["containerID"].as_str().unwrap(),
                c["restartCount"],
                c["hashes"]["plainHash"],
                c["hashes"]["plainHashWithoutResources"],
                c["hashes"]["extractedEnvFromMetadataHash"],
            )
        })
        .collect();
    assert_eq!(
        text,
        format!(r#"{{"containers":[{}]}}"#, rebuilt.join(",")),
        "not Go's encoding"
    );
}

async fn wait_annotation(node: &Node, pod: &str, pred: impl Fn(&Value) -> bool) -> Value {
    node.wait_pod(pod, LONG, |p| {
        support::sandbox::all_running(p) && annotation(p).is_some() && pred(p)
    })
    .await
}

/// [`annotation_current`], and the agent has read every container's started-with env values
/// (the env hash is left out until it has: right after a restart it may not have yet).
fn annotation_complete(pod: &Value) -> bool {
    annotation_current(pod)
        && annotation(pod)
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|parsed| parsed["containers"].as_array().cloned())
            .is_some_and(|entries| {
                entries.iter().all(|e| {
                    e["name"].as_str().is_some_and(|name| {
                        e["hashes"]["extractedEnvFromMetadataHash"] == expected_env_hash(pod, name)
                    })
                })
            })
}

/// The annotation names exactly the containers that pod status names now.
fn annotation_current(pod: &Value) -> bool {
    let Some(text) = annotation(pod) else {
        return false;
    };
    let Ok(parsed) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ids: Vec<&Value> = statuses.iter().map(|s| &s["containerID"]).collect();
    let written: Vec<&Value> = parsed["containers"]
        .as_array()
        .map(|c| c.iter().map(|c| &c["containerID"]).collect())
        .unwrap_or_default();
    ids == written
}

async fn annotation_for_release(kubelet: &str, release: &str) {
    let mut node = Node::start_with_kubelet(kubelet).await;
    tag_test_image("docker.io/library/busybox:1.28");
    let golden = support::golden::row(release, GOLDEN_TAG);
    let golden_container: Value =
        serde_json::from_str(golden["input_text"].as_str().unwrap()).unwrap();
    let owner = json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "name": "cs", "uid": "6d1c7f0e-0000-4000-8000-000000000001", "controller": true}]);

    // Single container.
    let single = unique("single");
    node.run_pod_with_meta(
        &single,
        json!({"ownerReferences": owner}),
        json!({"containers": [golden_container.clone()]}),
    )
    .await;
    let pod = wait_annotation(&node, &single, annotation_complete).await;
    assert_annotation_matches(&pod, release);

    // Multi container, one with env from metadata.
    let multi = unique("multi");
    let mut side = busybox("side", POLITE);
    side["env"] = json!([
        env_from("V", "metadata.annotations['v']"),
        env_from("L", "metadata.labels['app']")
    ]);
    node.run_pod_with_meta(
        &multi,
        json!({"ownerReferences": owner, "labels": {"app": "web"}, "annotations": {"v": "1"}}),
        json!({"containers": [side, golden_container]}),
    )
    .await;
    let pod = wait_annotation(&node, &multi, annotation_complete).await;
    assert_annotation_matches(&pod, release);
    let before = annotation(&pod).unwrap();

    // A pod neither kruise's nor opted in is left alone.
    let plain = unique("plain");
    node.run_pod(&plain, json!({"containers": [busybox("app", POLITE)]}))
        .await;

    // After a restart the annotation follows the new container (kruise's judgement of
    // "updated" reads it); the other entry is unchanged.
    let old = container_id(&pod, "side");
    support::client()
        .stop_container(&old, Duration::from_secs(2))
        .await
        .unwrap();
    let pod = wait_annotation(&node, &multi, |p| {
        container_id(p, "side") != old
            && container_status(p, "side")["restartCount"] == 1
            && annotation_complete(p)
    })
    .await;
    assert_annotation_matches(&pod, release);
    assert_ne!(annotation(&pod).unwrap(), before);
    // The restart was not an env restart: InPlaceUpdateReady is not False, no opt-in.
    assert!(node.events(&multi, "Killing").is_empty());

    // Only content changes are written: each pod's states as its containers appear and get
    // their env hashes, a handful in all, and nothing while nothing changes.
    let patches = |node: &mut Node| -> f64 {
        let (_, metrics) = node.agent().get("/metrics").unwrap();
        metrics
            .lines()
            .find(|l| l.starts_with("inplaced_runtime_meta_patches_total{result=\"success\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let before = patches(&mut node);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(annotation(&node.pod(&plain).unwrap()).is_none());
    assert_eq!(patches(&mut node), before, "written again without a change");
    assert!((3.0..=10.0).contains(&before), "{before} patches");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn annotation_matches_kruise_and_golden_hashes_at_era_a() {
    annotation_for_release("v1.30.7", "1.30.7").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn annotation_matches_kruise_and_golden_hashes_at_era_c() {
    annotation_for_release("v1.31.12", "1.31.12").await;
}

/// The restart trigger, with an annotation and then with a label, once per change, on a
/// kubelet whose copy of the pod follows the API 600 ms late: the settle delay must outlast
/// that, or the kubelet recreates the container with the old values.
async fn restart_trigger(script: &str) -> (Node, String) {
    let node = Node::start_with(
        NodeOptions::kubelet("v1.30.7").lagging_kubelet(Duration::from_millis(600)),
    )
    .await;
    let name = unique("trigger");
    let mut app = busybox("app", script);
    app["env"] = json!([
        env_from("V", "metadata.annotations['v']"),
        env_from("L", "metadata.labels['app']")
    ]);
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo bye > /tmp/pre-stop-ran"]}}});
    let pod = node
        .run_pod_with_meta(
            &name,
            json!({"labels": {"app": "web"}, "annotations": {"v": "1", OPT_IN: "true"}}),
            json!({"containers": [app]}),
        )
        .await;
    let first = container_id(&pod, "app");
    assert_eq!(support::env_of(&first, "V").await.as_deref(), Some("1"));
    // Nothing to do while values match.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node.proxy.stop_count(&first), 0);

    node.patch_pod_metadata(&name, json!({"annotations": {"v": "2"}}))
        .await;
    let started = Instant::now();
    let pod = node.wait_replaced(&name, "app", &first).await;
    let second = container_id(&pod, "app");
    assert_eq!(
        support::env_of(&second, "V").await.as_deref(),
        Some("2"),
        "kubelet saw the change"
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "settle delay");
    assert_eq!(node.proxy.stop_count(&first), 1, "exactly one kill");
    let killing = node.events(&name, "Killing");
    assert!(
        killing.iter().any(|e| e["message"]
            == format!("Stopping containerID containerd://{first} by container meta restarter")),
        "{killing:#?}"
    );

    node.patch_pod_metadata(&name, json!({"labels": {"app": "api"}}))
        .await;
    let pod = node.wait_replaced(&name, "app", &second).await;
    let third = container_id(&pod, "app");
    assert_eq!(support::env_of(&third, "L").await.as_deref(), Some("api"));
    assert_eq!(node.proxy.stop_count(&second), 1);
    // Settled: no further restarts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = node.pod(&name).unwrap();
    assert_eq!(container_id(&pod, "app"), third);
    assert_eq!(node.proxy.stop_count(&third), 0);
    assert_eq!(container_status(&pod, "app")["restartCount"], 2);
    // The opted-in pod carries the annotation too, with the started-with env hash.
    let pod = wait_annotation(&node, &name, annotation_current).await;
    let meta: Value = serde_json::from_str(&annotation(&pod).unwrap()).unwrap();
    assert_eq!(
        meta["containers"][0]["hashes"]["extractedEnvFromMetadataHash"],
        expected_env_hash(&pod, "app")
    );
    (node, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn restart_trigger_with_an_annotation_and_a_label() {
    let (mut node, _) = restart_trigger(POLITE).await;
    // Started-with values came from the OCI spec: the agent never exec'd `env`; the preStop
    // hook ran (two ExecSync calls: one per kill).
    assert_eq!(node.proxy.calls("ExecSync"), 2);
    // Restart timing counts both as env-change restarts.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, metrics) = node.agent().get("/metrics").unwrap();
        if metrics.contains("inplaced_restarts_total{trigger=\"env-change\",result=\"ready\"} 2") {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn restart_trigger_works_in_an_image_without_env() {
    // kruise issue 2136: `env` through ExecSync fails in such images.
    let script = format!("rm -f /bin/env /usr/bin/env /sbin/env; {POLITE}");
    let (node, name) = restart_trigger(&script).await;
    let pod = node.pod(&name).unwrap();
    let id = container_id(&pod, "app");
    let exec = support::client()
        .exec_sync(&id, vec!["env".into()], Duration::from_secs(3))
        .await;
    assert!(
        exec.as_ref().map_or(true, |r| r.exit_code != 0),
        "env must be missing: {exec:?}"
    );
    node.stop().await;
}

/// A value the kubelet does not give the container (its copy of the pod keeps the old
/// annotation, long past the settle delay): one restart, then a warning and a metric, never a
/// loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_unmatchable_value_is_reported_once_and_left_alone() {
    let mut node = Node::start().await;
    let name = unique("unmatchable");
    let mut app = busybox("app", POLITE);
    app["env"] = json!([env_from("V", "metadata.annotations['v']")]);
    let pod = node
        .run_pod_with_meta(
            &name,
            json!({"annotations": {"v": "1", OPT_IN: "true"}}),
            json!({"containers": [app]}),
        )
        .await;
    let first = container_id(&pod, "app");
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    node.kubelet.as_ref().unwrap().keep_stale_metadata(&uid);
    node.patch_pod_metadata(&name, json!({"annotations": {"v": "2"}}))
        .await;
    let pod = node.wait_replaced(&name, "app", &first).await;
    let second = container_id(&pod, "app");
    let deadline = Instant::now() + LONG;
    while node.events(&name, "EnvFromMetadataUnmatched").is_empty() {
        assert!(Instant::now() < deadline, "no warning event");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(node.proxy.stop_count(&first), 1);
    assert_eq!(node.proxy.stop_count(&second), 0, "never a loop");
    assert_eq!(node.events(&name, "EnvFromMetadataUnmatched").len(), 1);
    let (_, metrics) = node.agent().get("/metrics").unwrap();
    assert!(
        metrics.contains("inplaced_env_restarts_total{result=\"unmatched\"} 1"),
        "{metrics}"
    );
    // After an agent restart the journal still remembers the kill: no second one.
    drop(node.agent.take());
    node.start_agent();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(node.proxy.stop_count(&second), 0);
    assert_eq!(container_id(&node.pod(&name).unwrap(), "app"), second);
    node.stop().await;
}

/// A kruise pod: the env-from-metadata change is acted on only while kruise-manager has set
/// `InPlaceUpdateReady` False; the annotation's env hash tells the manager when it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kruise_pod_restarts_only_while_in_place_update_ready_is_false() {
    let node = Node::start().await;
    let name = unique("kruise");
    let mut app = busybox("app", POLITE);
    app["env"] = json!([env_from("V", "metadata.annotations['v']")]);
    let owner = json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "name": "cs", "uid": "6d1c7f0e-0000-4000-8000-000000000002", "controller": true}]);
    let pod = node
        .run_pod_with_meta(
            &name,
            json!({"ownerReferences": owner, "annotations": {"v": "1"}}),
            json!({"containers": [app]}),
        )
        .await;
    let first = container_id(&pod, "app");
    node.set_pod_condition(&name, "InPlaceUpdateReady", "True")
        .await;
    node.patch_pod_metadata(&name, json!({"annotations": {"v": "2"}}))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node.proxy.stop_count(&first),
        0,
        "not while InPlaceUpdateReady is True"
    );
    let env_hash = |p: &Value| -> Value {
        serde_json::from_str::<Value>(&annotation(p).unwrap_or_default())
            .map(|m| m["containers"][0]["hashes"]["extractedEnvFromMetadataHash"].clone())
            .unwrap_or(Value::Null)
    };
    let pod = wait_annotation(&node, &name, annotation_current).await;
    assert_eq!(container_id(&pod, "app"), first);
    assert_ne!(
        env_hash(&pod),
        expected_env_hash(&pod, "app"),
        "still the old values"
    );

    node.set_pod_condition(&name, "InPlaceUpdateReady", "False")
        .await;
    let pod = node.wait_replaced(&name, "app", &first).await;
    let second = container_id(&pod, "app");
    assert_eq!(support::env_of(&second, "V").await.as_deref(), Some("2"));
    assert_eq!(node.proxy.stop_count(&first), 1);
    // What kruise-manager waits for: the started-with hash equals the expected one.
    node.wait_pod(&name, LONG, |p| {
        annotation_current(p) && env_hash(p) == expected_env_hash(p, "app")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node.proxy.stop_count(&second), 0);
    node.stop().await;
}

/// A terminating pod is never touched, whatever its labels and annotations say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_terminating_pod_is_left_alone() {
    let node = Node::start().await;
    let name = unique("terminating");
    let mut app = busybox("app", "trap '' TERM; while true; do sleep 0.1; done");
    app["env"] = json!([env_from("V", "metadata.annotations['v']")]);
    let pod = node
        .run_pod_with_meta(
            &name,
            json!({"annotations": {"v": "1", OPT_IN: "true"}}),
            json!({"containers": [app], "terminationGracePeriodSeconds": 8}),
        )
        .await;
    let id = container_id(&pod, "app");
    let api: ::kube::Api<k8s_openapi::api::core::v1::Pod> =
        ::kube::Api::namespaced(node.client.clone(), support::sandbox::NS);
    api.delete(&name, &::kube::api::DeleteParams::default())
        .await
        .unwrap();
    node.wait_pod(&name, LONG, |p| {
        p.pointer("/metadata/deletionTimestamp").is_some()
    })
    .await;
    node.patch_pod_metadata(&name, json!({"annotations": {"v": "2"}}))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node.proxy.stop_count(&id),
        0,
        "the agent stopped a terminating pod's container"
    );
    assert!(node.events(&name, "Killing").iter().all(|e| {
        !e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("container meta restarter")
    }));
    node.stop().await;
}

/// kubelet would not start a stopped container of a `restartPolicy: Never` pod again: a change
/// of the metadata its env comes from must not stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_pod_kubelet_would_not_restart_is_left_alone() {
    let mut node = Node::start().await;
    let name = unique("never");
    let mut app = busybox("app", POLITE);
    app["env"] = json!([env_from("V", "metadata.annotations['v']")]);
    let pod = node
        .run_pod_with_meta(
            &name,
            json!({"annotations": {"v": "1", OPT_IN: "true"}}),
            json!({"containers": [app], "restartPolicy": "Never"}),
        )
        .await;
    let id = container_id(&pod, "app");
    node.patch_pod_metadata(&name, json!({"annotations": {"v": "2"}}))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node.proxy.stop_count(&id),
        0,
        "the agent stopped a container kubelet would not start again"
    );
    let (_, metrics) = node.agent().get("/metrics").unwrap();
    assert!(
        metrics.contains("inplaced_env_restarts_total{result=\"not_restartable\"} 1"),
        "{metrics}"
    );
    node.stop().await;
}

/// An annotation write the API keeps failing is retried with backoff (the status writer's:
/// 200 ms doubling), not on every pass; once the API takes it again, it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_refused_annotation_write_backs_off() {
    use apiserver_double::{Fault, RequestMatch};
    let node = Node::start().await;
    let name = unique("refused-meta");
    let refused = node.server.faults().add(
        Fault::respond(500).on(RequestMatch::any()
            .user(support::sandbox::AGENT_USER)
            .resource("pods")
            .subresource("status")
            .name(&name)),
    );
    node.run_pod_with_meta(
        &name,
        json!({"annotations": {OPT_IN: "true"}}),
        json!({"containers": [busybox("app", POLITE)]}),
    )
    .await;
    let deadline = Instant::now() + LONG;
    while node.server.faults().fired(refused) == 0 {
        assert!(Instant::now() < deadline, "no write tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Tried at about 0, 0.2, 0.6, 1.4, 3 and 6.2 s (each on the next 250 ms pass): at most
    // seven in these 6 s, where a pass every 250 ms would have sent two dozen.
    let tried = node.server.faults().fired(refused);
    assert!((3..=7).contains(&tried), "{tried} writes in about 6 s");
    node.server.faults().remove(refused);
    wait_annotation(&node, &name, |_| true).await;
    node.stop().await;
}
