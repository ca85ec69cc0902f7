//! containerd stopped and started again at different points of a request: before the agent
//! acts on it, while it is stopping the container, after the stop and before kubelet starts the
//! new container, and in the middle of an env-from-metadata restart. Every request must end
//! truthfully (Succeeded) with each targeted container stopped exactly once: no StopContainer
//! after one answered OK, and at most one after one that failed because the runtime went away
//! under it (the agent cannot know whether that one's SIGTERM arrived: it sends it again when
//! the container still runs).
//! Alone in its binary, one test running the points one after the other: it stops the shared
//! containerd (cargo runs test binaries one at a time).

mod support;

use std::time::{Duration, Instant};

use inplaced::cri::proto::ContainerState;
use serde_json::json;
use support::sandbox::{Node, container_id, container_phase, takes_v_from_annotation};
use support::unique;

/// Shuts down on SIGTERM after a second: containerd goes away within that second.
const SLOW_TO_STOP: &str = "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done";
const LONG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Point {
    /// containerd is down when the request is created.
    BeforeTheKill,
    /// containerd goes away while StopContainer is under way.
    DuringTheKill,
    /// containerd goes away once the container has exited, before its replacement runs.
    AfterTheStop,
}

async fn runtime_outage(pause: Duration) {
    support::containerd_script("stop-daemon");
    tokio::time::sleep(pause).await;
    support::containerd_script("start-daemon");
}

async fn wait_exited(id: &str) {
    let cri = support::client();
    let deadline = Instant::now() + LONG;
    loop {
        let state = cri
            .container_status(id, false)
            .await
            .ok()
            .and_then(|r| r.status)
            .map(|s| s.state);
        if state == Some(ContainerState::ContainerExited as i32) {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `id` got a StopContainer, none after one answered OK, and at most two (one outage).
fn assert_stopped_once(node: &Node, id: &str, context: &str) {
    let outcomes = node.proxy.stop_outcomes(id);
    let after_ok = outcomes
        .iter()
        .position(|ok| *ok)
        .map(|at| at + 1 < outcomes.len());
    assert!(
        !outcomes.is_empty() && outcomes.len() <= 2 && after_ok != Some(true),
        "{context}: {id} was stopped with these outcomes (true: answered OK): {outcomes:?}"
    );
}

async fn crr_with_runtime_restart(point: Point) {
    let node = Node::start().await;
    let pod_name = unique("runtime-restart");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                   "command": ["/bin/sh", "-c", SLOW_TO_STOP]}]}),
        )
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    let strategy = json!({"terminationGracePeriodSeconds": 10, "failurePolicy": "Fail"});
    match point {
        Point::BeforeTheKill => {
            support::containerd_script("stop-daemon");
            node.create_crr(&crr_name, &pod_name, &["app"], strategy)
                .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            support::containerd_script("start-daemon");
        }
        Point::DuringTheKill => {
            node.create_crr(&crr_name, &pod_name, &["app"], strategy)
                .await;
            node.wait_stop_issued(&old, LONG).await;
            runtime_outage(Duration::from_millis(1500)).await;
        }
        Point::AfterTheStop => {
            node.create_crr(&crr_name, &pod_name, &["app"], strategy)
                .await;
            node.wait_stop_issued(&old, LONG).await;
            wait_exited(&old).await;
            runtime_outage(Duration::from_millis(1500)).await;
        }
    }
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(
        container_phase(&crr, "app"),
        "Succeeded",
        "{point:?}: a runtime restart is no failure: {crr:#}"
    );
    let pod = node.wait_replaced(&pod_name, "app", &old).await;
    let new = container_id(&pod, "app");
    // Settled: nothing more is stopped.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_stopped_once(&node, &old, &format!("{point:?}"));
    assert_eq!(node.proxy.stop_count(&new), 0, "{point:?}");
    node.stop().await;
}

/// An env-from-metadata restart with containerd going away during its stop.
async fn env_restart_with_runtime_restart() {
    let node = Node::start().await;
    let pod_name = unique("env-runtime-restart");
    let app = takes_v_from_annotation(json!({"name": "app", "image": "localhost/busybox:local",
        "command": ["/bin/sh", "-c", SLOW_TO_STOP]}));
    let pod = node
        .run_env_pod(&pod_name, json!({"containers": [app]}))
        .await;
    let old = container_id(&pod, "app");
    node.patch_pod_metadata(&pod_name, json!({"annotations": {"v": "2"}}))
        .await;
    node.wait_stop_issued(&old, LONG).await;
    runtime_outage(Duration::from_millis(1500)).await;
    let pod = node.wait_replaced(&pod_name, "app", &old).await;
    let new = container_id(&pod, "app");
    assert_eq!(support::env_of(&new, "V").await.as_deref(), Some("2"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_stopped_once(&node, &old, "env restart");
    assert_eq!(node.proxy.stop_count(&new), 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn runtime_restarts_at_each_point_of_a_request_neither_fail_it_nor_kill_twice() {
    for point in [
        Point::BeforeTheKill,
        Point::DuringTheKill,
        Point::AfterTheStop,
    ] {
        crr_with_runtime_restart(point).await;
    }
    env_restart_with_runtime_restart().await;
}
