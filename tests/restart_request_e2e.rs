//! ContainerRestartRequests end to end, without OpenKruise: the agent against the kubelet
//! stand-in, the API double and real containerd, driven the way a user drives it (`inplaced
//! restart` with a user's kubeconfig, or a request made through the API). The CRI proxy in front
//! of the agent counts every StopContainer it sends.

mod support;

use std::collections::HashSet;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use support::sandbox::{NS, Node, all_running, container_id, container_status};
use support::unique;

const LONG: Duration = Duration::from_secs(60);

/// Exits promptly on SIGTERM, as a well-behaved application does.
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";
/// Ready one second after it starts (its readiness probe looks for the file), so that the pod is
/// visibly unready for a while after each restart.
const SLOW_READY: &str =
    "trap 'exit 0' TERM; (sleep 1; touch /tmp/ready) & while true; do sleep 0.1; done";

fn busybox(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "localhost/busybox:local", "command": ["/bin/sh", "-c", script]})
}

fn slow_ready(name: &str) -> Value {
    slow_ready_running(name, SLOW_READY)
}

fn slow_ready_running(name: &str, script: &str) -> Value {
    let mut c = busybox(name, script);
    c["readinessProbe"] =
        json!({"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1});
    c
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A kubeconfig of a user (not the agent's identity).
fn user_kubeconfig(node: &Node) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    node.server.write_kubeconfig(file.path(), None).unwrap();
    file
}

fn restart_command(kubeconfig: &tempfile::NamedTempFile, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_inplaced"));
    command
        .arg("restart")
        .args(args)
        .args(["-n", NS, "--kubeconfig"])
        .arg(kubeconfig.path());
    command.kill_on_drop(true);
    command
}

async fn restart_cli(node: &Node, args: &[&str]) -> Output {
    let kubeconfig = user_kubeconfig(node);
    restart_command(&kubeconfig, args).output().await.unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn requests(node: &Node) -> Vec<Value> {
    node.server.store().list("containerrestartrequests", NS)
}

fn request(node: &Node, name: &str) -> Value {
    node.server
        .store()
        .get("containerrestartrequests", NS, name)
        .unwrap_or_default()
}

/// Creates a request through the API as a user would, labelled with `node_label`.
async fn create_request(node: &Node, node_label: &str, spec: Value) -> String {
    node.create_request("ContainerRestartRequest", node_label, spec)
        .await
}

async fn wait_final(node: &Node, name: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let r = request(node, name);
        if matches!(
            r.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        ) {
            return r;
        }
        assert!(Instant::now() < deadline, "{name} never finished: {r:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn state<'a>(request: &'a Value, container: &str) -> &'a Value {
    request
        .pointer("/status/containers")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().find(|s| s["name"] == container))
        .unwrap_or(&Value::Null)
}

fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
}

/// Follows the pods of `label` (app=<label>) through a watch, every state the API server held,
/// until stopped: the most that were unready at once.
fn watch_unready(node: &Node, label: &str) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    support::most_unready(
        ::kube::Api::namespaced(node.client.clone(), NS),
        &format!("app={label}"),
    )
}

/// `inplaced restart -l app=<label> --max-unavailable <max>`, with the pods followed meanwhile:
/// the command's output and the most pods that were unready at once.
async fn watched_rollout(node: &Node, label: &str, max: &str) -> (Output, usize) {
    let (stop, most) = watch_unready(node, label);
    // The watch's first list is in before the first request is made.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let selector = format!("app={label}");
    let args = [
        "-l",
        &selector,
        "--max-unavailable",
        max,
        "--timeout",
        "60s",
    ];
    let output = restart_cli(node, &args).await;
    stop.store(true, Ordering::Relaxed);
    (output, most.await.unwrap())
}

async fn run_labelled_pods(node: &Node, label: &str, count: usize) -> Vec<(String, String)> {
    run_labelled_pods_of(node, label, count, SLOW_READY).await
}

async fn run_labelled_pods_of(
    node: &Node,
    label: &str,
    count: usize,
    script: &str,
) -> Vec<(String, String)> {
    let mut pods = Vec::new();
    for i in 0..count {
        let name = format!("{label}-{i}");
        node.server
            .store()
            .create(
                "pods",
                json!({"metadata": {"name": name, "namespace": NS, "labels": {"app": label}},
                       "spec": {"nodeName": node.node, "hostNetwork": true,
                                "terminationGracePeriodSeconds": 5,
                                "containers": [slow_ready_running("app", script)]}}),
            )
            .unwrap();
        pods.push(name);
    }
    let mut out = Vec::new();
    for name in pods {
        let pod = node
            .wait_pod(&name, LONG, |p| all_running(p) && pod_ready(p))
            .await;
        out.push((name, container_id(&pod, "app")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn one_container_is_restarted_in_place_by_the_cli() {
    let mut node = Node::start().await;
    let pod_name = unique("single");
    let mut app = busybox("app", POLITE);
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo bye > /tmp/pre-stop-ran"]}}});
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [app, busybox("side", POLITE)]}),
        )
        .await;
    let (old, side) = (container_id(&pod, "app"), container_id(&pod, "side"));

    let output = restart_cli(
        &node,
        &[&pod_name, "-c", "app", "--wait", "--timeout", "60s"],
    )
    .await;
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(": Succeeded"), "{}", text(&output));
    let name = stdout
        .lines()
        .find_map(|l| l.strip_prefix("containerrestartrequest/"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();

    let after = node.pod(&pod_name).unwrap();
    let new = container_id(&after, "app");
    assert_ne!(new, old);
    assert_eq!(container_status(&after, "app")["restartCount"], 1);
    assert_eq!(
        container_id(&after, "side"),
        side,
        "the other container kept running"
    );
    assert_eq!(container_status(&after, "side")["restartCount"], 0);
    assert_eq!(
        after["metadata"]["uid"], pod["metadata"]["uid"],
        "the same pod"
    );
    assert_eq!(node.proxy.stop_count(&old), 1, "exactly one stop");
    assert_eq!(node.proxy.stop_count(&side), 0);
    assert_eq!(node.proxy.calls("ExecSync"), 1, "the preStop hook ran");

    let done = request(&node, &name);
    assert_eq!(done["spec"]["podUID"], pod["metadata"]["uid"]);
    assert_eq!(
        done["metadata"]["labels"]["inplaced.io/node-name"],
        node.node.as_str()
    );
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["podUID"], pod["metadata"]["uid"]);
    let app_state = state(&done, "app");
    assert_eq!(app_state["oldContainerID"], format!("containerd://{old}"));
    assert_eq!(app_state["newContainerID"], format!("containerd://{new}"));
    assert!(app_state["readyTime"].is_string(), "{done:#}");
    assert!(done["status"]["completionTime"].is_string());
    assert_eq!(done["status"]["containers"].as_array().unwrap().len(), 1);

    let killing = node.events(&pod_name, "Killing");
    assert_eq!(killing.len(), 1, "{killing:#?}");
    assert_eq!(
        killing[0]["message"],
        format!("Stopping container app by ContainerRestartRequest {name}")
    );
    node.wait_event(&pod_name, "Restarted", LONG).await;
    let restarted = node.events(&pod_name, "Restarted");
    assert_eq!(restarted.len(), 1, "{restarted:#?}");
    assert_eq!(
        restarted[0]["message"],
        format!("Container app restarted in place by ContainerRestartRequest {name} and ready")
    );

    // The restart is timed under its own trigger.
    let deadline = Instant::now() + LONG;
    loop {
        let (_, metrics) = node.agent().get("/metrics").unwrap();
        let ready = sample(
            &metrics,
            "inplaced_restarts_total{trigger=\"restart-request\",result=\"ready\"}",
        );
        if ready == Some(1.0) {
            assert_eq!(
                sample(
                    &metrics,
                    "inplaced_restarts_total{trigger=\"crr\",result=\"ready\"}"
                ),
                Some(0.0)
            );
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn ordered_restart_stops_each_container_after_the_one_before_is_ready() {
    let node = Node::start().await;
    let pod_name = unique("ordered");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [slow_ready("a"), slow_ready("b"), busybox("c", POLITE)]}),
        )
        .await;
    node.wait_pod(&pod_name, LONG, pod_ready).await;
    let (old_a, old_b, c) = (
        container_id(&pod, "a"),
        container_id(&pod, "b"),
        container_id(&pod, "c"),
    );
    let name = create_request(
        &node,
        &node.node,
        json!({"podName": pod_name, "containers": [{"name": "b"}, {"name": "a"}],
               "strategy": {"orderedRestart": true}}),
    )
    .await;
    let done = wait_final(&node, &name, LONG).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    // b first: a's old container finished only after b's new one was reported ready.
    let b_ready: k8s_openapi::jiff::Timestamp = state(&done, "b")["readyTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let a_finished = support::client()
        .container_status(&old_a, false)
        .await
        .unwrap()
        .status
        .unwrap()
        .finished_at;
    let b_finished = support::client()
        .container_status(&old_b, false)
        .await
        .unwrap()
        .status
        .unwrap()
        .finished_at;
    assert!(b_finished < a_finished, "b was stopped first");
    // readyTime has one-second resolution: a stopped after the second b became ready in.
    assert!(
        i128::from(a_finished) >= b_ready.as_nanosecond(),
        "a stopped at {a_finished}, b ready at {b_ready}"
    );
    let after = node.pod(&pod_name).unwrap();
    for (container, old) in [("a", &old_a), ("b", &old_b)] {
        assert_eq!(container_status(&after, container)["restartCount"], 1);
        assert_eq!(node.proxy.stop_count(old), 1);
    }
    assert_eq!(container_id(&after, "c"), c, "c was not named: untouched");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_rollout_of_ten_pods_keeps_at_most_three_unready() {
    let node = Node::start().await;
    let label = unique("roll");
    let pods = run_labelled_pods(&node, &label, 10).await;
    let (output, most) = watched_rollout(&node, &label, "3").await;
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("10 of 10 pods restarted in place"),
        "{}",
        text(&output)
    );
    assert!(
        most <= 3,
        "{most} pods were unready at once\n{}",
        text(&output)
    );
    // Batches, not one pod at a time: the limit was reached.
    assert!(
        most >= 2,
        "at most {most} unready at once: no batching seen"
    );
    for (name, old) in &pods {
        let pod = node.pod(name).unwrap();
        assert_eq!(container_status(&pod, "app")["restartCount"], 1, "{name}");
        assert_eq!(node.proxy.stop_count(old), 1, "{name}");
    }
    assert_eq!(requests(&node).len(), 10);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_disruption_budget_caps_a_batch_and_blocks_when_it_allows_nothing() {
    let node = Node::start().await;
    let label = unique("pdb");
    let pods = run_labelled_pods(&node, &label, 4).await;
    let pdb = unique("budget");
    node.server
        .store()
        .create(
            "poddisruptionbudgets",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": pdb, "namespace": NS},
                   "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": label}}}}),
        )
        .unwrap();
    let (output, most) = watched_rollout(&node, &label, "3").await;
    let selector = format!("app={label}");
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        most, 1,
        "the budget (3 of 4 available) allows one at a time"
    );
    for (name, old) in &pods {
        assert_eq!(node.proxy.stop_count(old), 1, "{name}");
    }

    // A budget that allows no disruption: nothing is made, and the command says why when it
    // stops following (the rollout goes on and would go ahead once the budget allows).
    let mut budget = node
        .server
        .store()
        .get("poddisruptionbudgets", NS, &pdb)
        .unwrap();
    budget["spec"]["minAvailable"] = json!("100%");
    node.server
        .store()
        .replace("poddisruptionbudgets", budget)
        .unwrap();
    let made = requests(&node).len();
    let stops = node.proxy.calls("StopContainer");
    let output = restart_cli(&node, &["-l", &selector, "--timeout", "3s"]).await;
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    let all = text(&output);
    assert!(
        all.contains(&format!(
            "PodDisruptionBudget {pdb} allows no disruption (4 healthy, 4 required)"
        )) && all.contains("the rollout goes on"),
        "{all}"
    );
    assert_eq!(requests(&node).len(), made, "no request was made");
    assert_eq!(node.proxy.calls("StopContainer"), stops);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn refusals_and_bad_input_are_answered_in_the_status_without_a_stop() {
    let node = Node::start().await;
    let app = || json!({"containers": [busybox("app", POLITE)]});
    let plain = unique("plain");
    node.run_pod(&plain, app()).await;
    let never = unique("never");
    let mut spec = app();
    spec["restartPolicy"] = json!("Never");
    node.run_pod(&never, spec).await;
    let on_failure = unique("onfailure");
    let mut spec = app();
    spec["restartPolicy"] = json!("OnFailure");
    node.run_pod(&on_failure, spec).await;
    // A static pod as its mirror shows it (the kubelet's config source is a file).
    let static_pod = unique("static");
    node.run_pod_with_meta(
        &static_pod,
        json!({"annotations": {"kubernetes.io/config.source": "file"}}),
        app(),
    )
    .await;

    let cases = [
        (json!({"podName": never}), "restartPolicy Never"),
        (json!({"podName": on_failure}), "restartPolicy OnFailure"),
        (json!({"podName": static_pod}), "is a static pod"),
        (json!({"podName": "no-such-pod"}), "not found on node"),
        (
            json!({"podName": plain, "containers": [{"name": "app"}, {"name": "nope"}]}),
            "container \"nope\" is not an app container",
        ),
        (
            json!({"podName": plain, "podUID": "another-uid"}),
            "the request was made for UID another-uid",
        ),
        (
            json!({"podName": plain, "containers": "app"}),
            "invalid request, nothing done: invalid spec",
        ),
        (
            json!({"podName": plain, "strategy": {"minStartedSeconds": -1}}),
            "minStartedSeconds",
        ),
    ];
    let mut made = Vec::new();
    for (spec, expected) in &cases {
        made.push((
            create_request(&node, &node.node, spec.clone()).await,
            *expected,
        ));
    }
    // Labelled for another node: this agent never sees it.
    let foreign = create_request(&node, "another-node", json!({"podName": plain})).await;
    for (name, expected) in &made {
        let done = wait_final(&node, name, LONG).await;
        assert_eq!(done["status"]["phase"], "Failed", "{done:#}");
        let message = done["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{expected}: {message}");
    }
    assert_eq!(
        request(&node, &foreign).get("status"),
        None,
        "not this node's"
    );
    assert_eq!(node.proxy.calls("StopContainer"), 0, "nothing was stopped");
    let pod = node.pod(&plain).unwrap();
    assert_eq!(container_status(&pod, "app")["restartCount"], 0);

    // The CLI refuses bad arguments before making anything.
    for args in [
        vec!["-l", "app=x", "--max-unavailable", "0"],
        vec![plain.as_str(), "--max-unavailable", "2"],
        vec![plain.as_str(), "-c", "app", "-c", "app"],
    ] {
        let output = restart_cli(&node, &args).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
    }
    let unknown = restart_cli(&node, &["-l", "app=nothing-matches"]).await;
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(text(&unknown).contains("nothing to restart"));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_agent_killed_mid_rollout_resumes_it_without_a_second_restart() {
    let mut node = Node::start().await;
    let label = unique("resume");
    // Deaf to SIGTERM: each stop lasts the pod's whole grace (5 s), so the agent dies during one.
    let deaf = "trap '' TERM; (sleep 1; touch /tmp/ready) & while true; do sleep 0.1; done";
    let pods = run_labelled_pods_of(&node, &label, 5, deaf).await;
    let kubeconfig = user_kubeconfig(&node);
    let selector = format!("app={label}");
    let rollout = restart_command(
        &kubeconfig,
        &[
            "-l",
            &selector,
            "--max-unavailable",
            "2",
            "--timeout",
            "90s",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // The first batch's stops are issued: the agent dies with them under way.
    node.wait_stop_issued(&pods[0].1, LONG).await;
    node.agent().signal(Signal::SIGKILL);
    node.agent().wait_exit(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    node.start_agent();
    let output = tokio::time::timeout(Duration::from_secs(120), rollout.wait_with_output())
        .await
        .expect("the rollout finishes")
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let mut seen = HashSet::new();
    for (name, old) in &pods {
        let pod = node.pod(name).unwrap();
        assert_eq!(
            container_status(&pod, "app")["restartCount"],
            1,
            "{name} restarted once: {}",
            text(&output)
        );
        assert!(node.proxy.stop_count(old) >= 1);
        let new = container_id(&pod, "app");
        assert_eq!(
            node.proxy.stop_count(&new),
            0,
            "{name}: its new container was left alone"
        );
        seen.insert(new);
    }
    assert_eq!(seen.len(), 5);
    node.stop().await;
}

/// A second rollout within ten minutes meets the kubelet's crash back-off (10 s on 1.33, which
/// retries a pod in back-off every 10–15 s, at random here as in the kubelet): the rollout's
/// progress says so, with the window the kubelet starts it in, instead of looking stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_rollout_shows_the_kubelets_crash_back_off() {
    let node = Node::start_with(support::sandbox::NodeOptions::kubelet("v1.33.5")).await;
    let label = unique("again");
    let pods = run_labelled_pods(&node, &label, 1).await;
    let selector = format!("app={label}");
    let first = restart_cli(&node, &["-l", &selector, "--timeout", "60s"]).await;
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        !text(&first).contains("crash back-off"),
        "the first restart is free: {}",
        text(&first)
    );
    let started = Instant::now();
    let second = restart_cli(&node, &["-l", &selector, "--timeout", "60s"]).await;
    let took = started.elapsed();
    assert!(second.status.success(), "{}", text(&second));
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(
        out.contains(
            "app Restarting: the kubelet will start it again after its crash back-off, between "
        ),
        "{}",
        text(&second)
    );
    assert!(
        took >= Duration::from_secs(10),
        "the kubelet's 10 s wait: {took:?}"
    );
    let pod = node.pod(&pods[0].0).unwrap();
    assert_eq!(container_status(&pod, "app")["restartCount"], 2);
    node.stop().await;
}

/// Ctrl-C while following a rollout detaches: the command exits 130 saying how to follow it
/// again, and the agent carries the rollout out to its end without it; `inplaced rollout status`
/// then follows it to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_interrupted_follower_detaches_and_the_rollout_goes_on() {
    let node = Node::start().await;
    let label = unique("sigint");
    let pods = run_labelled_pods(&node, &label, 4).await;
    let kubeconfig = user_kubeconfig(&node);
    let selector = format!("app={label}");
    let follower = restart_command(&kubeconfig, &["-l", &selector, "--timeout", "60s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + LONG;
    while requests(&node).is_empty() {
        assert!(Instant::now() < deadline, "the rollout made no request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(follower.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, Signal::SIGINT).unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), follower.wait_with_output())
        .await
        .expect("the follower exits")
        .unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", text(&output));
    let all = text(&output);
    let rollouts = node
        .server
        .store()
        .list("containerrestartrollouts.inplaced.io", NS);
    assert_eq!(rollouts.len(), 1);
    let name = rollouts[0]["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(
        all.contains(&format!(
            "detached: containerrestartrollout/{name} goes on without this terminal; follow it again with: inplaced rollout status {name} -n {NS}"
        )),
        "{all}"
    );
    // Followed again to its end, by another command.
    let mut status = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"));
    status
        .args(["rollout", "status", &name, "-n", NS, "--kubeconfig"])
        .arg(kubeconfig.path());
    let again = tokio::task::spawn_blocking(move || status.output().unwrap())
        .await
        .unwrap();
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("4 of 4 pods restarted in place"),
        "{}",
        text(&again)
    );
    for (name, old) in &pods {
        let pod = node.pod(name).unwrap();
        assert_eq!(container_status(&pod, "app")["restartCount"], 1, "{name}");
        assert_eq!(node.proxy.stop_count(old), 1, "{name}");
    }
    node.stop().await;
}

/// The first failed pod stops a rollout (its default failure policy): the command names the pod
/// and the reason and exits 1, and no request is made for the pods after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_failed_pod_stops_the_rollout() {
    let node = Node::start().await;
    let label = unique("stops");
    for (i, policy) in ["Always", "Never", "Always"].into_iter().enumerate() {
        let name = format!("{label}-{i}");
        node.server
            .store()
            .create(
                "pods",
                json!({"metadata": {"name": name, "namespace": NS, "labels": {"app": label}},
                       "spec": {"nodeName": node.node, "hostNetwork": true, "restartPolicy": policy,
                                "terminationGracePeriodSeconds": 5,
                                "containers": [busybox("app", POLITE)]}}),
            )
            .unwrap();
        node.wait_pod(&name, LONG, |p| all_running(p) && pod_ready(p))
            .await;
    }
    let selector = format!("app={label}");
    let output = restart_cli(&node, &["-l", &selector, "--timeout", "60s"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let all = text(&output);
    assert!(
        all.contains(&format!(
            "pod/{label}-1: not restarted: pod {label}-1 has restartPolicy Never"
        )),
        "{all}"
    );
    assert!(
        all.contains(&format!("rollout failed: 1 pods failed to restart: pod {label}-1: pod {label}-1 has restartPolicy Never")),
        "{all}"
    );
    assert!(all.contains("1 of 3 pods restarted"), "{all}");
    let made: Vec<String> = requests(&node)
        .iter()
        .map(|r| r["spec"]["podName"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(made.len(), 2, "{made:?}");
    assert!(!made.contains(&format!("{label}-2")), "{made:?}");
    let last = node.pod(&format!("{label}-2")).unwrap();
    assert_eq!(container_status(&last, "app")["restartCount"], 0);
    node.stop().await;
}

/// A preStop hook that fails does not stop the restart (the kubelet goes ahead too); the pod gets
/// a `FailedPreStopHook` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_failing_pre_stop_hook_is_reported_and_the_restart_goes_ahead() {
    let node = Node::start().await;
    let pod_name = unique("hookfail");
    let mut app = busybox("app", POLITE);
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "exit 3"]}}});
    let pod = node.run_pod(&pod_name, json!({"containers": [app]})).await;
    let old = container_id(&pod, "app");
    let name = create_request(&node, &node.node, json!({"podName": pod_name})).await;
    let done = wait_final(&node, &name, LONG).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(node.proxy.stop_count(&old), 1);
    node.wait_event(&pod_name, "FailedPreStopHook", LONG).await;
    let failed = node.events(&pod_name, "FailedPreStopHook");
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0]["type"], "Warning");
    node.stop().await;
}
