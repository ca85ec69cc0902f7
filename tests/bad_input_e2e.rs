//! Bad input on the node sandbox with real containerd: malformed and hostile requests, objects of
//! other nodes, huge durations, huge pods and megabyte env values. Each gets a clear status or
//! log line and nothing else happens: the CRI proxy counts every StopContainer the agent sends,
//! and the agent stays healthy. Also what must never leave the agent: env values (in its log,
//! metrics and the admin socket); and a warning for credentials open to others.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};
use support::sandbox::{NS, Node, all_running, container_id};
use support::unique;

const LONG: Duration = Duration::from_secs(60);
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";
/// i64::MAX seconds: what a hostile or broken client can put in any duration field.
const HUGE: i64 = i64::MAX;

fn busybox(name: &str) -> Value {
    json!({"name": name, "image": "localhost/busybox:local", "command": ["/bin/sh", "-c", POLITE]})
}

/// A CRR written straight into the API store (no webhook checks it on the way in), labelled for
/// `node_label` as kruise's webhook labels requests.
fn raw_crr(
    node: &Node,
    node_label: &str,
    spec: Value,
    labels: Value,
    annotations: Value,
) -> String {
    let name = unique("bad");
    let mut all_labels = json!({"crr.apps.kruise.io/node-name": node_label,
                                "crr.apps.kruise.io/active": "true"});
    for (k, v) in labels.as_object().into_iter().flatten() {
        all_labels[k] = v.clone();
    }
    node.server
        .store()
        .create(
            "containerrecreaterequests",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
                   "metadata": {"name": name, "namespace": NS, "labels": all_labels,
                                "annotations": annotations},
                   "spec": spec}),
        )
        .unwrap();
    name
}

fn delete_crr(node: &Node, name: &str) {
    node.server
        .store()
        .delete("containerrecreaterequests", NS, name)
        .unwrap();
}

/// Waits until the request's status (its message or a container's) says `text`.
async fn wait_message(node: &Node, name: &str, text: &str) -> Value {
    node.wait_crr(name, LONG, |c| c["status"].to_string().contains(text))
        .await
}

/// Requests the agent must refuse, and requests for objects of other nodes: not one kill, a
/// clear status where the request is this node's, the agent healthy throughout. Then a valid
/// request with huge durations: one kill, done, no overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn malformed_and_foreign_requests_kill_nothing() {
    let mut node = Node::start().await;
    // The agent alone answers here: the manager stand-in would complete some of these requests
    // itself (its pod is gone, it is not active) before the agent's status shows.
    if let Some(manager) = node.manager.take() {
        manager.stop();
    }
    let pod_name = unique("victim");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app"), busybox("side")]}),
        )
        .await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let app = container_id(&pod, "app");
    let me = node.node.clone();
    let none = json!({});
    let with_uid = json!({"crr.apps.kruise.io/pod-uid": uid});

    // Refused at once, completed with the reason.
    let invalid: Vec<(Value, &str)> = vec![
        (
            json!({"podName": pod_name, "containers": []}),
            "spec.containers is empty",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "app"}, {"name": "app"}]}),
            "listed twice",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "app"}],
                   "strategy": {"terminationGracePeriodSeconds": -1}}),
            "negative",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "app"}],
                   "strategy": {"minStartedSeconds": -5}}),
            "negative",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "app"}],
                   "strategy": {"failurePolicy": "Sometimes"}}),
            "neither Fail nor Ignore",
        ),
        (
            json!({"podName": pod_name, "containers": "app"}),
            "invalid spec",
        ),
        (
            json!({"podName": 17, "containers": [{"name": "app"}]}),
            "invalid spec",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": ""}]}),
            "no name",
        ),
    ];
    for (spec, text) in &invalid {
        let name = raw_crr(&node, &me, spec.clone(), with_uid.clone(), none.clone());
        let crr = wait_message(&node, &name, text).await;
        assert_eq!(crr["status"]["phase"], "Completed", "{spec}: {crr:#}");
    }

    // Valid, but not for anything this node may touch: a status that says why, no kill.
    let elsewhere = unique("elsewhere");
    node.server
        .store()
        .create(
            "pods",
            json!({"metadata": {"name": elsewhere, "namespace": NS},
                   "spec": {"nodeName": "some-other-node", "containers": [busybox("app")]}}),
        )
        .unwrap();
    let cases: Vec<(Value, Value, &str)> = vec![
        (
            json!({"podName": elsewhere, "containers": [{"name": "app"}]}),
            none.clone(),
            "not found on this node",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "app"}]}),
            json!({"crr.apps.kruise.io/pod-uid": "00000000-0000-0000-0000-000000000000"}),
            "the request was made for UID 00000000",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "nope"}]}),
            with_uid.clone(),
            "not found container on Node",
        ),
    ];
    for (spec, labels, text) in &cases {
        let name = raw_crr(&node, &me, spec.clone(), labels.clone(), none.clone());
        wait_message(&node, &name, text).await;
        // The manager would complete it (pod gone or replaced); one request per pod at a time,
        // so it goes before the next one.
        delete_crr(&node, &name);
    }
    // Labelled for another node: not this agent's business at all, not even its status.
    let foreign = raw_crr(
        &node,
        "some-other-node",
        json!({"podName": pod_name, "containers": [{"name": "app"}]}),
        with_uid.clone(),
        none.clone(),
    );
    // Garbage where the manager's annotations go, a huge unready grace: waits, no overflow.
    let waiting = raw_crr(
        &node,
        &me,
        json!({"podName": pod_name, "containers": [{"name": "side"}],
               "strategy": {"unreadyGracePeriodSeconds": HUGE}}),
        with_uid.clone(),
        json!({"crr.apps.kruise.io/sync-container-statuses": "{not json",
               "crr.apps.kruise.io/unready-acquired": "2026-01-01T00:00:00Z"}),
    );
    node.wait_crr(&waiting, LONG, |c| {
        c.pointer("/status/containerRecreateStates/0/message")
            .and_then(Value::as_str)
            .is_some_and(|m| m.contains("unreadyGracePeriodSeconds"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    delete_crr(&node, &waiting);
    assert!(
        node.crr(&foreign).get("status").is_none(),
        "{:#}",
        node.crr(&foreign)
    );
    assert_eq!(
        node.proxy.stop_counts(),
        Default::default(),
        "no container was stopped"
    );
    assert_eq!(node.agent().get("/healthz").unwrap().0, 200);
    // The one we could not refuse: a valid request with the largest grace (int64) and minimum
    // start time (int32) there are. The container stops on SIGTERM; the request then waits (it
    // cannot have been up for 68 years): one kill, no overflow, still healthy.
    let huge = raw_crr(
        &node,
        &me,
        json!({"podName": pod_name, "containers": [{"name": "app"}],
               "strategy": {"terminationGracePeriodSeconds": HUGE, "minStartedSeconds": i32::MAX}}),
        with_uid.clone(),
        none.clone(),
    );
    node.wait_pod(&pod_name, LONG, |p| {
        container_id(p, "app") != app && all_running(p)
    })
    .await;
    node.wait_crr(&huge, LONG, |c| {
        c.pointer("/status/containerRecreateStates/0/phase") == Some(&json!("Recreating"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node.proxy.stop_count(&app), 1);
    assert_eq!(
        node.proxy.stop_counts().len(),
        1,
        "{:?}",
        node.proxy.stop_counts()
    );
    assert_eq!(node.agent().get("/healthz").unwrap().0, 200);
    node.stop().await;
}

/// A pod of 2,000 containers and a container with a 1 MiB env value (no kubelet runs them:
/// the stand-in is stopped first, as a real one would refuse such pods): the agent keeps serving,
/// lists them, and the env value never appears in its log, metrics or admin socket. A
/// kubeconfig readable by others is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn huge_pods_and_env_values_stay_inside() {
    let mut node = Node::start().await;
    std::fs::set_permissions(
        node.kubeconfig.path(),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    if let Some(kubelet) = node.kubelet.take() {
        kubelet.stop().await.unwrap();
    }
    node.start_agent();
    let marker = format!("SECRET-{}", unique("v"));
    let big_value = format!("{marker}{}", "x".repeat(1 << 20));
    let many = unique("many");
    let containers: Vec<Value> = (0..2000).map(|i| busybox(&format!("c{i}"))).collect();
    let big = unique("big-env");
    let mut app = busybox("app");
    app["env"] = json!([{"name": "TOKEN", "value": big_value},
                        {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}}]);
    for (name, spec, annotations) in [
        (&many, json!({"containers": containers}), json!({})),
        (
            &big,
            json!({"containers": [app]}),
            json!({"v": marker, "inplaced.io/runtime-containers-meta": "true"}),
        ),
    ] {
        let mut spec = spec;
        spec["nodeName"] = json!(node.node);
        node.server
            .store()
            .create(
                "pods",
                json!({"metadata": {"name": name, "namespace": NS, "annotations": annotations},
                       "spec": spec}),
            )
            .unwrap();
    }
    let admin = node.agent().admin_socket.display().to_string();
    let deadline = std::time::Instant::now() + LONG;
    let listing = loop {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["pods", "-o", "json", "--admin-socket", &admin])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        if output.status.success() && text.contains(&many) && text.contains(&big) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never listed the pods: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let view: Value = serde_json::from_str(&listing).unwrap();
    let many_view = view["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == many.as_str())
        .unwrap();
    assert_eq!(many_view["containers"].as_array().unwrap().len(), 2000);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node.agent().get("/healthz").unwrap().0, 200);
    let (_, metrics) = node.agent().get("/metrics").unwrap();
    let log = node.agent().log();
    for (place, text) in [
        ("admin socket", &listing),
        ("metrics", &metrics),
        ("log", &log),
    ] {
        assert!(
            !text.contains(&marker),
            "an env value leaked into the {place}"
        );
    }
    assert!(
        log.contains("a file with API credentials is accessible to group or others"),
        "{log}"
    );
    assert_eq!(node.proxy.stop_counts(), Default::default());
    node.stop().await;
}
