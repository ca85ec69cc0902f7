//! Every in-place restart is timed phase by phase from CRI's own timestamps, whatever triggered
//! it: the agent's /metrics and `inplaced pods` must agree with what containerd reports.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::sandbox::{Node, all_running, container_id};
use support::unique;

const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

/// The value of one sample line of the agent's /metrics, if present.
fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
}

async fn cri_seconds_between(old: &str, new: &str) -> (f64, i64, i64) {
    let cri = support::client();
    let old = cri
        .container_status(old, false)
        .await
        .unwrap()
        .status
        .unwrap();
    let new = cri
        .container_status(new, false)
        .await
        .unwrap()
        .status
        .unwrap();
    (
        (new.started_at - old.finished_at) as f64 / 1e9,
        old.finished_at,
        new.started_at,
    )
}

/// Waits until `inplaced pods` shows the container's last restart as ready; returns it.
async fn last_restart(node: &mut Node, pod: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = node.shown_container(pod)["last_restart"].clone();
        if found["ready_seconds"].is_number() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ready restart shown: {found:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_crr_restart_is_timed_from_cri_timestamps() {
    let mut node = Node::start().await;
    let pod_name = unique("timed");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
            "command": ["/bin/sh", "-c", POLITE]}]}),
        )
        .await;
    let old = container_id(&pod, "app");
    let crr = unique("crr");
    let created = std::time::Instant::now();
    node.create_crr(&crr, &pod_name, &["app"], json!({})).await;
    node.wait_completed(&crr, Duration::from_secs(60)).await;
    let create_to_completed = created.elapsed().as_secs_f64();
    let new = container_id(&node.pod(&pod_name).unwrap(), "app");

    let shown = last_restart(&mut node, &pod_name).await;
    assert_eq!(shown["trigger"], "crr", "{shown:#}");
    assert_eq!(shown["old_container_id"], old.as_str());
    assert_eq!(shown["new_container_id"], new.as_str());
    let (restart, finished_at, started_at) = cri_seconds_between(&old, &new).await;
    let shown_restart = shown["restart_seconds"].as_f64().unwrap();
    assert!(
        (shown_restart - restart).abs() < 1e-6,
        "restart phase {shown_restart} vs CRI {restart}"
    );
    let exited: k8s_openapi::jiff::Timestamp =
        shown["exited_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(exited.as_nanosecond(), i128::from(finished_at));
    let running: k8s_openapi::jiff::Timestamp =
        shown["running_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(running.as_nanosecond(), i128::from(started_at));
    let stop = shown["stop_seconds"].as_f64().unwrap();
    assert!(
        stop > 0.0 && stop < 5.0,
        "a polite container stops quickly: {stop}"
    );
    let total = shown["total_seconds"].as_f64().unwrap();
    let ready = shown["ready_seconds"].as_f64().unwrap();
    assert!(
        total + 1e-6 >= stop + restart + ready - 1e-3,
        "total covers the phases: {shown:#}"
    );

    let (_, metrics) = node.agent().get("/metrics").unwrap();
    assert_eq!(
        sample(
            &metrics,
            "inplaced_restarts_total{trigger=\"crr\",result=\"ready\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    let metric_restart = sample(
        &metrics,
        "inplaced_restart_duration_seconds_sum{trigger=\"crr\",phase=\"restart\"}",
    )
    .unwrap();
    assert!(
        (metric_restart - restart).abs() < 1e-6,
        "metric {metric_restart} vs CRI {restart}"
    );
    for phase in ["stop", "restart", "ready", "total"] {
        let count = sample(
            &metrics,
            &format!(
                "inplaced_restart_duration_seconds_count{{trigger=\"crr\",phase=\"{phase}\"}}"
            ),
        );
        assert_eq!(count, Some(1.0), "{phase}: {metrics}");
    }
    assert!(
        metrics.contains("le=\"0.005\"") && metrics.contains("le=\"600.0\""),
        "buckets 5 ms .. 10 min"
    );
    // The agent's own reaction: one kill, timed from its watch event, inside the request's life.
    assert_eq!(
        sample(&metrics, "inplaced_crr_reaction_duration_seconds_count"),
        Some(1.0),
        "{metrics}"
    );
    let reaction = sample(&metrics, "inplaced_crr_reaction_duration_seconds_sum").unwrap();
    assert!(
        reaction > 0.0 && reaction < create_to_completed,
        "reaction {reaction} s within {create_to_completed} s"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_updates_and_exits_are_told_apart() {
    let mut node = Node::start().await;
    node_sandbox::util::tag_image(
        &support::endpoint().to_string(),
        "localhost/busybox:local",
        "localhost/busybox:v2",
    )
    .await
    .unwrap();
    let pod_name = unique("triggers");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
            "command": ["/bin/sh", "-c", POLITE]}]}),
        )
        .await;
    let first = container_id(&pod, "app");

    // A container that stops on its own (here: stopped behind everyone's back) and is restarted.
    support::client()
        .stop_container(&first, Duration::from_secs(5))
        .await
        .unwrap();
    let pod = node
        .wait_pod(&pod_name, Duration::from_secs(30), |p| {
            container_id(p, "app") != first && all_running(p)
        })
        .await;
    let second = container_id(&pod, "app");
    let shown = last_restart(&mut node, &pod_name).await;
    assert_eq!(shown["trigger"], "container-exit", "{shown:#}");
    assert!(
        shown["stop_seconds"].is_null(),
        "nobody the agent knows issued the kill"
    );

    // The image changes: kubelet kills and recreates the container with a new hash.
    node.server
        .store()
        .merge_patch(
            "pods",
            support::sandbox::NS,
            &pod_name,
            json!({"spec": {"containers": [
            {"name": "app", "image": "localhost/busybox:v2"}]}}),
        )
        .unwrap();
    node.wait_pod(&pod_name, Duration::from_secs(30), |p| {
        container_id(p, "app") != second && all_running(p)
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let shown = last_restart(&mut node, &pod_name).await;
        if shown["old_container_id"] == second.as_str() {
            assert_eq!(shown["trigger"], "kubelet-update", "{shown:#}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the update restart never showed: {shown:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, metrics) = node.agent().get("/metrics").unwrap();
    for trigger in ["container-exit", "kubelet-update"] {
        assert_eq!(
            sample(
                &metrics,
                &format!("inplaced_restarts_total{{trigger=\"{trigger}\",result=\"ready\"}}")
            ),
            Some(1.0),
            "{trigger}: {metrics}"
        );
    }
    node.stop().await;
}
