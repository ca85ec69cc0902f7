//! ContainerRecreateRequests end to end: the agent against the kubelet and kruise-manager
//! stand-ins, the API double and real containerd. The CRI proxy in front of the agent counts
//! every StopContainer it sends: each request must kill each container exactly once.

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use node_sandbox::{Fault, FaultRule};
use serde_json::{Value, json};
use support::sandbox::{
    NS, Node, NodeOptions, container_id, container_phase, container_status, takes_v_from_annotation,
};
use support::unique;
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

fn busybox(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "localhost/busybox:local", "command": ["/bin/sh", "-c", script]})
}

/// Exits promptly on SIGTERM, as a well-behaved application does.
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn single_container_is_recreated_once_with_its_exec_pre_stop() {
    let node = Node::start().await;
    let pod_name = unique("single");
    let mut app = busybox("app", POLITE);
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo bye > /tmp/pre-stop-ran"]}}});
    let pod = node.run_pod(&pod_name, json!({"containers": [app]})).await;
    let old = container_id(&pod, "app");

    let crr_name = unique("crr");
    node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
        .await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    assert!(crr.pointer("/status/completionTime").is_some());

    let pod = node.pod(&pod_name).unwrap();
    let new = container_id(&pod, "app");
    assert_ne!(new, old, "a new container runs");
    assert_eq!(container_status(&pod, "app")["restartCount"], 1);
    assert_eq!(node.proxy.stop_count(&old), 1, "exactly one kill");
    assert_eq!(node.proxy.stop_count(&new), 0);
    // The preStop hook ran inside the old container before it was stopped.
    assert_eq!(node.proxy.calls("ExecSync"), 1);
    let killing = node.events(&pod_name, "Killing");
    assert_eq!(killing.len(), 1, "{killing:#?}");
    assert_eq!(
        killing[0]["message"],
        format!("Stopping container app by ContainerRecreateRequest {crr_name}")
    );
    assert!(node.events(&pod_name, "FailedPreStopHook").is_empty());
    // Status only: the agent never touched spec, labels or finalizers (the manager removed the
    // active label after completion).
    assert_eq!(crr.pointer("/spec/containers/0/name"), Some(&json!("app")));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn ordered_recreate_with_http_and_tcp_pre_stops_goes_one_container_at_a_time() {
    let node = Node::start().await;
    let pod_name = unique("ordered");
    let http_port = 20000 + u16::from(rand::random::<u8>()) * 10;
    let tcp_port = http_port + 1;
    let mut web = busybox(
        "web",
        &format!(
            "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 127.0.0.1:{http_port} -h /www"
        ),
    );
    web["ports"] = json!([{"name": "http", "containerPort": http_port}]);
    web["lifecycle"] = json!({"preStop": {"httpGet": {"path": "/index.html", "port": "http", "host": "127.0.0.1"}}});
    let mut side = busybox(
        "side",
        &format!("mkdir -p /www && exec httpd -f -p 127.0.0.1:{tcp_port} -h /www"),
    );
    side["lifecycle"] = json!({"preStop": {"tcpSocket": {"port": tcp_port, "host": "127.0.0.1"}}});
    let pod = node
        .run_pod(&pod_name, json!({"containers": [web, side]}))
        .await;
    let (old_web, old_side) = (container_id(&pod, "web"), container_id(&pod, "side"));

    let crr_name = unique("crr");
    node.create_crr(
        &crr_name,
        &pod_name,
        &["web", "side"],
        json!({"orderedRecreate": true, "terminationGracePeriodSeconds": 3}),
    )
    .await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "web"), "Succeeded", "{crr:#}");
    assert_eq!(container_phase(&crr, "side"), "Succeeded", "{crr:#}");
    assert!(
        node.events(&pod_name, "FailedPreStopHook").is_empty(),
        "{:#?}",
        node.events(&pod_name, "FailedPreStopHook")
    );
    assert_eq!(node.proxy.stop_count(&old_web), 1);
    assert_eq!(node.proxy.stop_count(&old_side), 1);

    // Ordered: side was stopped only after the new web container had started.
    let cri = support::client();
    let old_side_status = cri
        .container_status(&old_side, false)
        .await
        .unwrap()
        .status
        .unwrap();
    let pod = node.pod(&pod_name).unwrap();
    let new_web = cri
        .container_status(&container_id(&pod, "web"), false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(
        old_side_status.finished_at > new_web.started_at,
        "side stopped at {} before the new web started at {}",
        old_side_status.finished_at,
        new_web.started_at
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn force_recreate_and_min_started_seconds() {
    let node = Node::start().await;
    let pod_name = unique("force");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let old = container_id(&pod, "app");
    // The container restarts on its own before the request is handled: without forceRecreate
    // that would already count as recreated.
    support::client()
        .stop_container(&old, Duration::from_secs(5))
        .await
        .unwrap();
    let pod = node.wait_replaced(&pod_name, "app", &old).await;
    let restarted = container_id(&pod, "app");

    let crr_name = unique("crr");
    node.create_crr(
        &crr_name,
        &pod_name,
        &["app"],
        json!({"forceRecreate": true, "minStartedSeconds": 3}),
    )
    .await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    assert_eq!(
        node.proxy.stop_count(&restarted),
        1,
        "forceRecreate kills the current container once"
    );
    let pod = node.pod(&pod_name).unwrap();
    let newest = container_id(&pod, "app");
    assert_ne!(newest, restarted);
    let started: k8s_openapi::jiff::Timestamp = container_status(&pod, "app")
        .pointer("/state/running/startedAt")
        .unwrap()
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let completed: k8s_openapi::jiff::Timestamp = crr
        .pointer("/status/completionTime")
        .unwrap()
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        completed.duration_since(started).as_secs() >= 3,
        "completed {completed} less than minStartedSeconds after the start {started}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn failure_policies_and_an_unknown_container() {
    let node = Node::start().await;
    let pod_name = unique("policies");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("a", POLITE), busybox("b", POLITE)]}),
        )
        .await;
    let (a, b) = (container_id(&pod, "a"), container_id(&pod, "b"));
    // Every StopContainer of container a fails.
    node.proxy
        .add(FaultRule::new("StopContainer", Fault::error(Code::Internal)).for_container(&a));

    let fail = unique("fail");
    node.create_crr(
        &fail,
        &pod_name,
        &["a", "b"],
        json!({"failurePolicy": "Fail", "orderedRecreate": true}),
    )
    .await;
    let crr = node.wait_completed(&fail, LONG).await;
    assert_eq!(container_phase(&crr, "a"), "Failed", "{crr:#}");
    assert_ne!(
        container_phase(&crr, "b"),
        "Succeeded",
        "Fail stops at the first failure: {crr:#}"
    );
    assert_eq!(node.proxy.stops_forwarded(&b), 0, "b was never killed");

    let ignore = unique("ignore");
    node.create_crr(
        &ignore,
        &pod_name,
        &["a", "b"],
        json!({"failurePolicy": "Ignore", "orderedRecreate": true}),
    )
    .await;
    let crr = node.wait_completed(&ignore, LONG).await;
    assert_eq!(container_phase(&crr, "a"), "Failed", "{crr:#}");
    assert_eq!(
        container_phase(&crr, "b"),
        "Succeeded",
        "Ignore carries on: {crr:#}"
    );
    assert_eq!(node.proxy.stop_count(&b), 1);

    // A container the pod does not have: a clear message, no kill, and the manager's deadline ends it.
    node.proxy.clear();
    let ghost = unique("ghost");
    let stops_before: usize = node.proxy.stop_counts().values().sum();
    create_ghost(&node, &ghost, &pod);
    let crr = node
        .wait_crr(&ghost, LONG, |c| {
            c.pointer("/status/containerRecreateStates/0/message")
                == Some(&json!("not found container on Node"))
        })
        .await;
    assert_eq!(crr.pointer("/status/phase"), Some(&json!("Pending")));
    node.wait_completed(&ghost, LONG).await;
    let stops_after: usize = node.proxy.stop_counts().values().sum();
    assert_eq!(
        stops_after, stops_before,
        "nothing killed for an unknown container"
    );
    node.stop().await;
}

/// A CRR naming a container the pod does not have. kruise's webhook would refuse it, so it goes
/// straight into the store, labelled as the webhook labels.
fn create_ghost(node: &Node, name: &str, pod: &Value) {
    node.server
        .store()
        .create(
            "containerrecreaterequests",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
                   "metadata": {"name": name, "namespace": NS, "labels": {
                       "crr.apps.kruise.io/node-name": node.node,
                       "crr.apps.kruise.io/pod-uid": pod["metadata"]["uid"],
                       "crr.apps.kruise.io/active": "true"}},
                   "spec": {"podName": pod["metadata"]["name"], "containers": [{"name": "ghost"}],
                            "strategy": {"failurePolicy": "Fail"}, "activeDeadlineSeconds": 5}}),
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn two_requests_for_one_pod_run_one_after_the_other() {
    let node = Node::start().await;
    let pod_name = unique("siblings");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let first_target = container_id(&pod, "app");
    let (first, second) = (unique("first"), unique("second"));
    node.create_crr(&first, &pod_name, &["app"], json!({}))
        .await;
    node.create_crr(&second, &pod_name, &["app"], json!({}))
        .await;
    let crr = node
        .wait_crr(&second, LONG, |c| {
            c.pointer("/status/phase") == Some(&json!("Pending"))
        })
        .await;
    assert!(
        crr.pointer("/status/message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .contains(&first),
        "{crr:#}"
    );
    node.wait_completed(&first, LONG).await;
    // kruise issues 1626/2474: the sibling must not stay Pending forever.
    let done = node.wait_completed(&second, LONG).await;
    // The second request was made against the container the first one replaced: by kruise's
    // contract it is already recreated, so it succeeds without a kill of its own.
    assert_eq!(container_phase(&done, "app"), "Succeeded", "{done:#}");
    assert_eq!(node.proxy.stop_count(&first_target), 1);
    let total: usize = node.proxy.stop_counts().values().sum();
    assert_eq!(
        total,
        1,
        "the replaced container is not killed again: {:?}",
        node.proxy.stop_counts()
    );
    node.stop().await;
}

/// Waits until the proxy has seen the agent's first StopContainer of `id`, then SIGKILLs the
/// agent and starts it again on the same state directory.
async fn crash_agent_during_the_stop_of(node: &mut Node, id: &str) -> std::time::Instant {
    node.wait_stop_issued(id, LONG).await;
    let stop_seen = std::time::Instant::now();
    node.agent().signal(Signal::SIGKILL);
    node.agent().wait_exit(Duration::from_secs(5));
    node.start_agent();
    stop_seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn agent_sigkilled_during_a_graceful_stop_never_kills_twice() {
    let mut node = Node::start().await;
    let pod_name = unique("crash");
    // Shuts down gracefully on SIGTERM, taking two seconds: the agent dies in them.
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox(
                "app",
                "trap 'touch /tmp/terminating; sleep 2; exit 0' TERM; while true; do sleep 0.1; done"
            )]}),
        )
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    node.create_crr(
        &crr_name,
        &pod_name,
        &["app"],
        json!({"terminationGracePeriodSeconds": 10}),
    )
    .await;
    // The agent dies once the container has its SIGTERM (it marks that in a file).
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let marked = support::client()
            .exec_sync(
                &old,
                vec!["test".into(), "-f".into(), "/tmp/terminating".into()],
                Duration::from_secs(2),
            )
            .await
            .is_ok_and(|r| r.exit_code == 0);
        if marked {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no SIGTERM arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(node.proxy.stop_count(&old), 1);
    node.agent().signal(Signal::SIGKILL);
    node.agent().wait_exit(Duration::from_secs(5));
    node.start_agent();
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    assert_eq!(
        node.proxy.stop_count(&old),
        1,
        "killed exactly once across the crash"
    );
    node.stop().await;
}

/// A container that ignores SIGTERM survives a stop the runtime abandoned when the agent died
/// (containerd sends SIGTERM, then cancels the wait and never sends SIGKILL). The restarted agent
/// finishes that one kill once the first attempt's grace is over: SIGTERM, two seconds, SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn agent_sigkilled_during_a_stop_the_runtime_abandons_finishes_that_kill() {
    let mut node = Node::start().await;
    let pod_name = unique("stubborn");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", "trap '' TERM; while true; do sleep 0.1; done")]}),
        )
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    let grace = Duration::from_secs(4);
    node.create_crr(
        &crr_name,
        &pod_name,
        &["app"],
        json!({"terminationGracePeriodSeconds": 4}),
    )
    .await;
    let first_stop = crash_agent_during_the_stop_of(&mut node, &old).await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    let stopped = support::client()
        .container_status(&old, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(stopped.exit_code, 137, "SIGKILLed");
    assert_eq!(
        node.proxy.stop_count(&old),
        2,
        "the abandoned stop and its resumption"
    );
    // Not before the grace period of the first attempt was over.
    let killed_after =
        std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(stopped.finished_at as u64);
    let first_stop_wall = std::time::SystemTime::now() - first_stop.elapsed();
    assert!(
        killed_after
            .duration_since(first_stop_wall)
            .unwrap_or_default()
            + Duration::from_millis(300)
            >= grace,
        "SIGKILL came before the grace period was over"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_request_for_an_earlier_pod_with_the_same_name_kills_nothing() {
    let node = Node::start().await;
    let pod_name = unique("reborn");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let current = container_id(&pod, "app");
    let crr_name = unique("crr");
    // A request made for an earlier incarnation of the pod (another UID), written straight
    // into the store as the webhook would have labelled it back then.
    node.server
        .store()
        .create(
            "containerrecreaterequests",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
                   "metadata": {"name": crr_name, "namespace": NS, "labels": {
                       "crr.apps.kruise.io/node-name": node.node, "crr.apps.kruise.io/pod-uid": "an-earlier-uid",
                       "crr.apps.kruise.io/active": "true"}},
                   "spec": {"podName": pod_name, "containers": [{"name": "app",
                       "statusContext": {"containerID": format!("containerd://{current}"), "restartCount": 0}}]}}),
        )
        .unwrap();
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(
        crr.pointer("/status/message"),
        Some(&json!(node_sandbox::manager::MSG_POD_GONE)),
        "{crr:#}"
    );
    assert_eq!(node.proxy.stop_count(&current), 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn unready_grace_period_delays_the_kill() {
    let node = Node::start().await;
    let pod_name = unique("unready");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    node.create_crr(
        &crr_name,
        &pod_name,
        &["app"],
        json!({"unreadyGracePeriodSeconds": 2}),
    )
    .await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    let acquired: k8s_openapi::jiff::Timestamp = crr
        .pointer("/metadata/annotations/crr.apps.kruise.io~1unready-acquired")
        .and_then(Value::as_str)
        .expect("the manager acquired unready")
        .parse()
        .unwrap();
    let finished = support::client()
        .container_status(&old, false)
        .await
        .unwrap()
        .status
        .unwrap()
        .finished_at;
    let finished = k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(finished)).unwrap();
    assert!(
        finished.duration_since(acquired).as_secs_f64() >= 2.0,
        "killed at {finished}, unready acquired at {acquired}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_running_kruise_daemon_keeps_the_agent_off_requests() {
    let mut node = Node::start().await;
    let daemon = format!("kruise-daemon-{}", &unique("x")[2..]);
    node.run_pod(&daemon, json!({"containers": [busybox("daemon", POLITE)]}))
        .await;
    let body = node
        .agent()
        .wait_http("/readyz", 503, Duration::from_secs(20));
    assert!(body.contains("kruise-daemon pod"), "{body}");
    let pod_name = unique("guarded");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let crr_name = unique("crr");
    node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node.proxy.stop_count(&container_id(&pod, "app")),
        0,
        "no kill while kruise-daemon runs"
    );
    assert!(
        node.crr(&crr_name)
            .pointer("/status/phase")
            .is_none_or(|p| p == "")
    );
    // Once kruise-daemon is gone, the request is handled.
    node.server.store().delete("pods", NS, &daemon).unwrap();
    node.wait_completed(&crr_name, LONG).await;
    node.stop().await;
}

/// A CRR and an env-from-metadata change wanting the same container at the same moment: the
/// container is stopped once, by whichever came first; the other sees it recreated. The
/// preStop hook (4 s) holds the first kill open while the second decides.
async fn crr_and_env_change_on_one_container(env_change_first: bool) {
    let node = Node::start().await;
    let pod_name = unique("both");
    let mut app = takes_v_from_annotation(busybox("app", POLITE));
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 4"]}}});
    let pod = node
        .run_env_pod(&pod_name, json!({"containers": [app]}))
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    if env_change_first {
        node.patch_pod_metadata(&pod_name, json!({"annotations": {"v": "2"}}))
            .await;
        // Past the env restarter's 1 s settle: its kill is in the preStop hook now.
        tokio::time::sleep(Duration::from_millis(2000)).await;
        node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
            .await;
    } else {
        node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        node.patch_pod_metadata(&pod_name, json!({"annotations": {"v": "2"}}))
            .await;
    }
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    let pod = node.wait_replaced(&pod_name, "app", &old).await;
    let new = container_id(&pod, "app");
    assert_eq!(support::env_of(&new, "V").await.as_deref(), Some("2"));
    // Settled: nothing more is stopped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node.proxy.stop_count(&old), 1, "one stop for both triggers");
    assert_eq!(node.proxy.stop_count(&new), 0);
    assert_eq!(container_id(&node.pod(&pod_name).unwrap(), "app"), new);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_env_change_during_a_crr_kill_does_not_stop_the_container_again() {
    crr_and_env_change_on_one_container(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_crr_during_an_env_restart_does_not_stop_the_container_again() {
    crr_and_env_change_on_one_container(true).await;
}

/// A kubelet slow to notice exits (2 s relist) and to restart (8 s): the request waits in
/// Recreating without a second kill or a failure, and an env change made while the container
/// is down is taken up by the restart itself, not by another kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_slow_kubelet_is_waited_for_without_a_second_kill() {
    let node = Node::start_with(
        NodeOptions::kubelet("v1.30.7")
            .slow_kubelet(Duration::from_secs(2), Duration::from_secs(8)),
    )
    .await;
    let pod_name = unique("slow-kubelet");
    let app = takes_v_from_annotation(busybox("app", POLITE));
    let pod = node
        .run_env_pod(
            &pod_name,
            json!({"containers": [app, busybox("side", POLITE)]}),
        )
        .await;
    let (old_app, old_side) = (container_id(&pod, "app"), container_id(&pod, "side"));
    let crr_name = unique("crr");
    node.create_crr(&crr_name, &pod_name, &["app", "side"], json!({}))
        .await;
    node.wait_stop_issued(&old_app, LONG).await;
    node.wait_stop_issued(&old_side, LONG).await;
    node.patch_pod_metadata(&pod_name, json!({"annotations": {"v": "2"}}))
        .await;
    // Well inside the kubelet's 8 s: still waiting, nothing more stopped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let crr = node.crr(&crr_name);
    assert_eq!(
        crr.pointer("/status/phase"),
        Some(&json!("Recreating")),
        "{crr:#}"
    );
    let total: usize = node.proxy.stop_counts().values().sum();
    assert_eq!(total, 2, "{:?}", node.proxy.stop_counts());

    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    assert_eq!(container_phase(&crr, "side"), "Succeeded", "{crr:#}");
    let pod = node.pod(&pod_name).unwrap();
    let new_app = container_id(&pod, "app");
    assert_eq!(support::env_of(&new_app, "V").await.as_deref(), Some("2"));
    // Settled: the env change needed no kill of its own.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(node.proxy.stop_count(&old_app), 1);
    assert_eq!(node.proxy.stop_count(&old_side), 1);
    let total: usize = node.proxy.stop_counts().values().sum();
    assert_eq!(total, 2, "{:?}", node.proxy.stop_counts());
    assert_eq!(container_id(&node.pod(&pod_name).unwrap(), "app"), new_app);
    node.stop().await;
}

/// kruise-manager writes a request's status too: here it completes one whose pod is gone. A
/// status the agent decided from the version before that must not land and undo it; the same
/// write without a version does land (so this test sees a write that lands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_status_decided_from_an_older_version_does_not_undo_a_newer_one() {
    use inplaced::kube::status::{ObjectRef, StatusWriter, Target};

    let node = Node::start().await;
    let name = unique("stale");
    // Without the node-name label the agent does not watch it; the manager does.
    let created = node
        .server
        .store()
        .create(
            "containerrecreaterequests",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
                   "metadata": {"name": name, "namespace": NS},
                   "spec": {"podName": "gone", "containers": [{"name": "app"}]}}),
        )
        .unwrap();
    let older = created["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned);
    node.wait_crr(&name, LONG, |c| c["status"]["phase"] == "Completed")
        .await;

    let mut writer = StatusWriter::<Value>::new(
        node.client.clone(),
        inplaced::recreate::crr_resource("v1alpha1"),
        "ContainerRecreateRequest",
        Target::Status {
            clear: &["message", "completionTime"],
        },
    );
    let object = |resource_version: Option<String>| ObjectRef {
        namespace: NS.to_owned(),
        name: name.clone(),
        uid: created["metadata"]["uid"].as_str().unwrap().to_owned(),
        resource_version,
    };
    let recreating = json!({"phase": "Recreating"});
    writer.write(&object(older.clone()), &json!({}), recreating.clone());
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the write was sent");
    let crr = node.crr(&name);
    assert_eq!(crr["status"]["phase"], "Completed", "{crr:#}");
    assert!(crr.pointer("/status/completionTime").is_some(), "{crr:#}");

    // Past the writer's backoff after that refused write (200 ms), a decision from the same
    // refused version is not sent: it would be refused too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer.write(&object(older), &json!({}), json!({"phase": "Pending"}));
    assert!(
        tokio::time::timeout(Duration::from_secs(1), writer.finished())
            .await
            .is_err(),
        "a write from a version already refused was sent"
    );
    let codes: Vec<u16> = node
        .server
        .audit()
        .entries()
        .into_iter()
        .filter(|e| e.request.name == name && e.request.verb == "patch")
        .map(|e| e.code)
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 409).count(), 1, "{codes:?}");
    writer.write(&object(None), &json!({}), recreating);
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the write was sent");
    let crr = node.crr(&name);
    assert_eq!(crr["status"]["phase"], "Recreating", "{crr:#}");
    assert!(crr["status"]["completionTime"].is_null(), "{crr:#}");
    node.stop().await;
}

/// A status decided again from the version a write of ours landed on, before the watch brings
/// that write back, is not sent: the API server could only refuse it (409). A completed
/// request's status carries the time of the decision, so this happened once per completed
/// request whenever a second passed in between. A status decided from the newer version is
/// sent as usual, and so is one decided from a version a write of ours left unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_status_decided_again_from_the_version_of_its_own_write_is_not_sent() {
    use inplaced::kube::status::{ObjectRef, StatusWriter, Target};

    let node = Node::start().await;
    let name = unique("again");
    // Without the node-name label the agent does not watch it; the manager completes it.
    let created = node
        .server
        .store()
        .create(
            "containerrecreaterequests",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
                   "metadata": {"name": name, "namespace": NS},
                   "spec": {"podName": "gone", "containers": [{"name": "app"}]}}),
        )
        .unwrap();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let completed = node
        .wait_crr(&name, LONG, |c| c["status"]["phase"] == "Completed")
        .await;
    let version = |crr: &Value| {
        crr["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned)
    };
    let object = |resource_version: Option<String>| ObjectRef {
        namespace: NS.to_owned(),
        name: name.clone(),
        uid: uid.clone(),
        resource_version,
    };
    let status_at = |time: &str| json!({"phase": "Completed", "completionTime": time});
    let patches = || {
        node.server
            .audit()
            .entries()
            .into_iter()
            .filter(|e| e.request.name == name && e.request.subresource == "status")
            .filter(|e| e.request.verb == "patch")
            .map(|e| e.code)
            .collect::<Vec<_>>()
    };
    let mut writer = StatusWriter::<Value>::new(
        node.client.clone(),
        inplaced::recreate::crr_resource("v1alpha1"),
        "ContainerRecreateRequest",
        Target::Status {
            clear: &["message", "completionTime"],
        },
    );
    let before = patches();

    writer.write(
        &object(version(&completed)),
        &completed["status"],
        status_at("2026-01-01T00:00:01Z"),
    );
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the first write was sent");
    assert_eq!(
        node.crr(&name)["status"]["completionTime"],
        "2026-01-01T00:00:01Z"
    );

    // The same decision a second later, from the version the watch still shows.
    writer.write(
        &object(version(&completed)),
        &completed["status"],
        status_at("2026-01-01T00:00:02Z"),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(1), writer.finished())
            .await
            .is_err(),
        "a write from the superseded version was sent"
    );
    let sent: Vec<u16> = patches()[before.len()..].to_vec();
    assert_eq!(sent, [200], "{sent:?}");

    // From the version the write made, a new decision is written.
    let now = node.crr(&name);
    writer.write(
        &object(version(&now)),
        &now["status"],
        status_at("2026-01-01T00:00:03Z"),
    );
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the write from the new version was sent");
    assert_eq!(
        node.crr(&name)["status"]["completionTime"],
        "2026-01-01T00:00:03Z"
    );
    let sent: Vec<u16> = patches()[before.len()..].to_vec();
    assert_eq!(sent, [200, 200], "{sent:?}");

    // A write that changes nothing (the same status, said differently) leaves the version as
    // it was, so a decision from that version is still sent, and lands.
    let now = node.crr(&name);
    let mut same = status_at("2026-01-01T00:00:03Z");
    same["message"] = Value::Null;
    writer.write(&object(version(&now)), &completed["status"], same);
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the write that changes nothing was sent");
    assert_eq!(version(&node.crr(&name)), version(&now));
    writer.write(
        &object(version(&now)),
        &now["status"],
        status_at("2026-01-01T00:00:04Z"),
    );
    tokio::time::timeout(Duration::from_secs(10), writer.finished())
        .await
        .expect("the write after one that changed nothing was sent");
    assert_eq!(
        node.crr(&name)["status"]["completionTime"],
        "2026-01-01T00:00:04Z"
    );
    let sent: Vec<u16> = patches()[before.len()..].to_vec();
    assert_eq!(sent, [200, 200, 200, 200], "{sent:?}");
    node.stop().await;
}

/// A pod started after the agent last listed the runtime (containerd 1.6 streams no container
/// events; this agent lists every 30 s): a CRR of its container is carried out from the
/// runtime asked directly, as kruise-daemon asks it. Before, the request said "not found
/// container on Node" (Pending) until the agent's next listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_crr_of_a_container_not_listed_yet_asks_the_runtime() {
    let node = Node::start_with(
        NodeOptions::kubelet("v1.30.7").agent_args(&["--refresh-interval", "30s"]),
    )
    .await;
    // The agent is ready: it has listed the runtime once, before this pod existed.
    let pod_name = unique("unlisted");
    let pod = node
        .run_pod(&pod_name, json!({"containers": [busybox("app", POLITE)]}))
        .await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
        .await;
    let mut said = Vec::new();
    let started = std::time::Instant::now();
    let done = loop {
        let crr = node.crr(&crr_name);
        if let Some(message) = crr
            .pointer("/status/containerRecreateStates/0/message")
            .and_then(Value::as_str)
            && !said.iter().any(|m| m == message)
        {
            said.push(message.to_string());
        }
        if crr.pointer("/status/phase") == Some(&json!("Completed")) {
            break crr;
        }
        // Well before the agent's next listing (30 s after its first).
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not carried out before the agent listed the runtime again: {crr:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(container_phase(&done, "app"), "Succeeded", "{done:#}");
    assert!(
        !said.iter().any(|m| m.contains("not found container")),
        "the request said {said:?}"
    );
    assert_eq!(node.proxy.stop_count(&old), 1, "exactly one kill");
    node.stop().await;
}
