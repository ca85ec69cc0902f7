//! The kubelet's crash back-off meets in-place restarts (docs/kubelet-backoff.md): the kubelet
//! stand-in restarts a container stopped again and again as the kubelet does (the first restart
//! free, then 10 s, 20 s …), shows `CrashLoopBackOff` meanwhile, and the agent predicts each wait
//! from the restarts it saw: in `inplaced pods` and in the restart histograms' `backoff` phase.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::sandbox::{Node, NodeOptions, all_running, container_id, container_status};
use support::unique;

const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

fn one_container() -> Value {
    json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                           "command": ["/bin/sh", "-c", POLITE]}]})
}

/// A node whose kubelet 1.33 has `ReduceDefaultCrashLoopBackOffDecay` on (1 s doubling to
/// 60 s), named to the agent through a kubelet config file (kept while the node runs).
async fn reduced_decay_node() -> (Node, tempfile::NamedTempFile) {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "kind: KubeletConfiguration\nfeatureGates:\n  ReduceDefaultCrashLoopBackOffDecay: true\n",
    )
    .unwrap();
    let path = config.path().display().to_string();
    let options = NodeOptions::kubelet("v1.33.5")
        .crash_loop(node_sandbox::kubelet::CrashLoopSettings {
            reduce_decay_gate: true,
            ..Default::default()
        })
        .agent_args(&["--kubelet-config", &path]);
    (Node::start_with(options).await, config)
}

/// Waits until the agent shows a restart of `app` into `new_id`; returns the container.
async fn wait_shown_restart(node: &mut Node, pod: &str, new_id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let c = node.shown_container(pod);
        if c["last_restart"]["new_container_id"] == new_id {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no restart into {new_id} shown: {c:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Seconds from the old instance's exit to the new one's start, from containerd.
async fn cri_restart_seconds(old: &str, new: &str) -> f64 {
    let cri = support::client();
    let status = async |id: &str| {
        cri.container_status(id, false)
            .await
            .unwrap()
            .status
            .unwrap()
    };
    let (old, new) = (status(old).await, status(new).await);
    (new.started_at - old.finished_at) as f64 / 1e9
}

fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
}

/// Two ContainerRecreateRequests in a row on kubelet 1.33's defaults: the first restart is free,
/// the second waits the kubelet's 10 s (within a second), the pod shows `CrashLoopBackOff` with
/// the kubelet's message meanwhile, and the agent predicted both waits and the next one (20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_second_in_place_restart_waits_the_kubelets_back_off_as_predicted() {
    let mut node = Node::start_with(NodeOptions::kubelet("v1.33.5")).await;
    let pod_name = unique("backoff");
    let pod = node.run_pod(&pod_name, one_container()).await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    let first = container_id(&pod, "app");
    assert!(node.shown_container(&pod_name)["crash_backoff"].is_null());

    // First restart: free (the stand-in's reaction only).
    let crr = unique("crr");
    node.create_crr(&crr, &pod_name, &["app"], json!({})).await;
    node.wait_completed(&crr, Duration::from_secs(60)).await;
    let second = container_id(&node.pod(&pod_name).unwrap(), "app");
    let free = cri_restart_seconds(&first, &second).await;
    assert!(free < 2.0, "the first restart is free: {free} s");
    let c = wait_shown_restart(&mut node, &pod_name, &second).await;
    assert_eq!(c["last_restart"]["backoff_seconds"], 0.0, "{c:#}");
    assert_eq!(c["crash_backoff"]["next_wait_seconds"], 10, "{c:#}");

    // Second restart: the kubelet waits 10 s from the exit, saying so in the pod status.
    let crr = unique("crr");
    node.create_crr(&crr, &pod_name, &["app"], json!({})).await;
    let waiting = node
        .wait_pod(&pod_name, Duration::from_secs(30), |p| {
            container_status(p, "app")["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
        .await;
    let status = container_status(&waiting, "app");
    assert_eq!(
        status["state"]["waiting"]["message"],
        format!("back-off 10s restarting failed container=app pod={pod_name}_inplaced-e2e({uid})"),
        "{status:#}"
    );
    assert!(
        status["lastState"]["terminated"]["finishedAt"].is_string(),
        "{status:#}"
    );
    assert_eq!(
        status["restartCount"], 1,
        "counted when the next instance is made"
    );
    let c = node.shown_container(&pod_name);
    assert!(
        c["crash_backoff"]["until"].is_string(),
        "the agent shows the wait: {c:#}"
    );
    node.wait_event(&pod_name, "BackOff", Duration::from_secs(5))
        .await;
    // The request says so while it waits, with the time the kubelet starts the container.
    let held = node
        .wait_crr(&crr, Duration::from_secs(10), |r| {
            r.pointer("/status/containerRecreateStates/0/message")
                .and_then(Value::as_str)
                .is_some_and(|m| {
                    m.starts_with("the kubelet will start it again after its crash back-off, at ")
                })
        })
        .await;
    assert_eq!(held["status"]["phase"], "Recreating", "{held:#}");
    // The agent said so when it stopped the container.
    let killing = node.events(&pod_name, "Killing");
    let said = killing
        .iter()
        .filter_map(|e| e["message"].as_str())
        .any(|m| {
            m.ends_with("the kubelet will start it again after its crash back-off, about 10 s")
        });
    assert!(said, "{killing:#?}");

    node.wait_completed(&crr, Duration::from_secs(60)).await;
    let third = container_id(&node.pod(&pod_name).unwrap(), "app");
    let waited = cri_restart_seconds(&second, &third).await;
    assert!(
        (10.0..11.0).contains(&waited),
        "the kubelet's 10 s back-off: {waited} s"
    );
    let c = wait_shown_restart(&mut node, &pod_name, &third).await;
    assert_eq!(c["last_restart"]["backoff_seconds"], 10.0, "{c:#}");
    assert_eq!(c["crash_backoff"]["next_wait_seconds"], 20, "{c:#}");
    node.wait_pod(&pod_name, Duration::from_secs(30), all_running)
        .await;

    let metrics = node
        .agent()
        .wait_http("/metrics", 200, Duration::from_secs(5));
    let backoff = "inplaced_restart_duration_seconds_sum{trigger=\"crr\",phase=\"backoff\"}";
    assert_eq!(sample(&metrics, backoff), Some(10.0), "{metrics}");
    let count = "inplaced_restart_duration_seconds_count{trigger=\"crr\",phase=\"backoff\"}";
    assert_eq!(sample(&metrics, count), Some(2.0), "{metrics}");
    node.stop().await;
}

/// A kubelet 1.33 with `ReduceDefaultCrashLoopBackOffDecay` on (1 s doubling to 60 s), named to
/// the agent through its kubelet config file: a container stopped five times waits 0, 1, 2, 4
/// and 8 s, each as the agent predicted, and a sixth stop would wait 16 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn the_fifth_restart_waits_as_predicted_under_the_reduced_decay() {
    let (mut node, _config) = reduced_decay_node().await;
    let pod_name = unique("decay");
    let pod = node.run_pod(&pod_name, one_container()).await;
    let mut id = container_id(&pod, "app");
    let cri = support::client();
    for (restart, wait) in [0.0, 1.0, 2.0, 4.0, 8.0].into_iter().enumerate() {
        cri.stop_container(&id, Duration::from_secs(5))
            .await
            .unwrap();
        let old = id.clone();
        let running = node
            .wait_pod(&pod_name, Duration::from_secs(30), |p| {
                container_id(p, "app") != old && all_running(p)
            })
            .await;
        id = container_id(&running, "app");
        let took = cri_restart_seconds(&old, &id).await;
        // The stand-in's reaction (0.5 s) is a floor; its 200 ms sync a ceiling.
        let floor = f64::max(wait, 0.5);
        assert!(
            (floor..floor + 1.0).contains(&took),
            "restart {}: waited {took} s, the kubelet's back-off is {wait} s",
            restart + 1
        );
        let c = wait_shown_restart(&mut node, &pod_name, &id).await;
        assert_eq!(c["last_restart"]["trigger"], "container-exit", "{c:#}");
        assert_eq!(
            c["last_restart"]["backoff_seconds"],
            wait,
            "restart {}: {c:#}",
            restart + 1
        );
    }
    let c = node.shown_container(&pod_name);
    assert_eq!(c["crash_backoff"]["next_wait_seconds"], 16, "{c:#}");
    node.stop().await;
}

/// Forgetting: a container that ran more than the kubelet's 600 s since its last start is
/// restarted without a wait again, and the next wait starts over at the first step. The stops
/// are ContainerRestartRequests made by `inplaced restart`, on a kubelet 1.33 with the reduced
/// decay (1 s doubling), named to the agent through its kubelet config file. Takes ten minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn after_ten_minutes_of_running_the_back_off_starts_over_as_predicted() {
    let (mut node, _config) = reduced_decay_node().await;
    let pod_name = unique("reset");
    let pod = node.run_pod(&pod_name, one_container()).await;
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    node.server
        .write_kubeconfig(kubeconfig.path(), None)
        .unwrap();
    let mut id = container_id(&pod, "app");
    // (wait the kubelet holds the restart, the agent's prediction of the next one)
    let rounds = [(0.0, 1), (1.0, 2), (0.0, 1), (1.0, 2)];
    for (round, (wait, next)) in rounds.into_iter().enumerate() {
        if round == 2 {
            // Ran 600 s since its last start: the kubelet forgets the entry at the next exit.
            let c = node.shown_container(&pod_name);
            assert_eq!(c["crash_backoff"]["next_wait_seconds"], 2, "{c:#}");
            tokio::time::sleep(Duration::from_secs(605)).await;
            let c = node.shown_container(&pod_name);
            assert!(
                c["crash_backoff"].is_null(),
                "after 600 s of running a stop is restarted at once: {c:#}"
            );
        }
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["restart", &pod_name, "-n", support::sandbox::NS, "--wait"])
            .args(["--timeout", "60s", "--kubeconfig"])
            .arg(kubeconfig.path())
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let old = id.clone();
        id = container_id(&node.pod(&pod_name).unwrap(), "app");
        let took = cri_restart_seconds(&old, &id).await;
        let floor = f64::max(wait, 0.5);
        assert!(
            (floor..floor + 1.0).contains(&took),
            "round {}: waited {took} s, the kubelet's back-off is {wait} s",
            round + 1
        );
        let c = wait_shown_restart(&mut node, &pod_name, &id).await;
        assert_eq!(c["last_restart"]["trigger"], "restart-request", "{c:#}");
        assert_eq!(
            c["last_restart"]["backoff_seconds"],
            wait,
            "round {}: {c:#}",
            round + 1
        );
        assert_eq!(
            c["crash_backoff"]["next_wait_seconds"],
            next,
            "round {}: {c:#}",
            round + 1
        );
    }
    node.stop().await;
}
