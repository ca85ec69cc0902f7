//! containerd stopped and started again while the agent is stopping a container for a request.
//! Alone in its binary: it stops the shared containerd (cargo runs test binaries one at a time).

mod support;

use std::time::Duration;

use serde_json::json;
use support::sandbox::{Node, container_id, container_phase};
use support::unique;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_restart_during_the_kill_neither_fails_the_request_nor_kills_twice() {
    let node = Node::start().await;
    let pod_name = unique("runtime-restart");
    // Shuts down on SIGTERM after a second: containerd goes away within that second.
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                   "command": ["/bin/sh", "-c", "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done"]}]}),
        )
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    node.create_crr(
        &crr_name,
        &pod_name,
        &["app"],
        json!({"terminationGracePeriodSeconds": 10, "failurePolicy": "Fail"}),
    )
    .await;
    node.wait_stop_issued(&old, Duration::from_secs(60)).await;
    support::containerd_script("stop-daemon");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    support::containerd_script("start-daemon");

    let crr = node
        .wait_completed(&crr_name, Duration::from_secs(60))
        .await;
    assert_eq!(
        container_phase(&crr, "app"),
        "Succeeded",
        "a transient runtime error is no failure: {crr:#}"
    );
    assert_eq!(node.proxy.stop_count(&old), 1, "killed exactly once");
    node.stop().await;
}
