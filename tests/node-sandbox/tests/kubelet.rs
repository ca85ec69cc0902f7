//! The kubelet stand-in against the real containerd: stored hashes equal the golden values of
//! the real kubelet for the exact container JSON, restarts and recreation as a real kubelet here.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use inplaced::cri::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use node_sandbox::golden;
use node_sandbox::util::{normalize_image, tag_image, test_cri_endpoint, unique_name};
use serde_json::{Value, json};

/// Golden inputs whose every field a busybox container can run with: the image name is made an
/// alias of the local busybox (no registry here), and with no command busybox's default
/// `sleep infinity` runs. The container JSON in the pod is the golden `input_text` unchanged.
const GOLDEN_TAGS: &[&str] = &[
    "real-nginx-deploy-apiserver-defaulted",
    "real-mysql-apiserver-defaulted",
    "real-pause-apiserver-defaulted",
    "real-debug-ephemeral-like-apiserver-defaulted",
];

async fn golden_hashes_for(release: &str) {
    let cases: Vec<golden::GoldenCase> = GOLDEN_TAGS
        .iter()
        .map(|t| golden::case(release, t).unwrap())
        .collect();
    let containers: Vec<Value> = cases
        .iter()
        .map(|c| serde_json::from_str(&c.input_text).unwrap())
        .collect();
    for c in &containers {
        let image = c["image"].as_str().unwrap();
        tag_image(&test_cri_endpoint(), TEST_IMAGE, &normalize_image(image))
            .await
            .unwrap();
    }
    let env = Env::start(&format!("v{release}"), Duration::from_secs(2)).await;
    let name = unique_name("golden");
    let created = env.create_pod(&name, json!({"containers": containers}));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), all_running)
        .await;
    assert_eq!(pod["status"]["phase"], "Running");

    let runtime = env.kubelet().runtime_containers(&uid).await.unwrap();
    assert_eq!(runtime.len(), cases.len(), "{runtime:#?}");
    for case in &cases {
        let want: Value = serde_json::from_str(&case.input_text).unwrap();
        let name = want["name"].as_str().unwrap();
        let rc = runtime.iter().find(|c| c.name == name).unwrap();
        assert_eq!(rc.state, "running", "{name}");
        assert_eq!(
            rc.annotations.get(labels::CONTAINER_HASH),
            case.hash.as_ref(),
            "{release} {}: stored hash vs golden",
            case.tag
        );
        assert_eq!(
            rc.annotations.get(labels::CONTAINER_HASH_WITHOUT_RESOURCES),
            case.hash_without_resources.as_ref(),
            "{release} {}: stored hashWithoutResources vs golden",
            case.tag
        );
        assert_eq!(rc.annotations[labels::CONTAINER_RESTART_COUNT], "0");
        assert_eq!(rc.labels[labels::POD_UID], uid);
        assert_eq!(rc.labels[labels::POD_NAMESPACE], NS);
        let status = status_of(&pod, name);
        assert_eq!(
            status["containerID"],
            json!(format!("containerd://{}", rc.id))
        );
        assert_eq!(status["ready"], true);
        assert_eq!(status["started"], true);
    }
    // The nginx-deploy input declares a port: kubelet's ports annotation.
    let nginx = runtime.iter().find(|c| c.name == "nginx").unwrap();
    let ports: Value = serde_json::from_str(&nginx.annotations[labels::CONTAINER_PORTS]).unwrap();
    assert_eq!(ports[0]["containerPort"], 80);
    env.stop().await;
    assert!(
        cri()
            .list_pod_sandboxes(None)
            .await
            .unwrap()
            .iter()
            .all(|s| s.labels.get(labels::POD_UID) != Some(&uid)),
        "stop() must remove the sandbox"
    );
    assert_eq!(pod_cgroup_dirs(&uid), Vec::<std::path::PathBuf>::new());
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn stored_hashes_equal_golden_era_a() {
    golden_hashes_for("1.26.15").await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn stored_hashes_equal_golden_era_b_with_resize_gate() {
    golden_hashes_for("1.30.7").await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn stored_hashes_equal_golden_era_c() {
    golden_hashes_for("1.36.3").await;
}

const TRAP_SCRIPT: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn restarts_a_cri_stopped_container_like_kubelet() {
    let delay = Duration::from_millis(1500);
    let env = Env::start("v1.30.7", delay).await;
    let name = unique_name("restart");
    env.create_pod(
        &name,
        json!({"terminationGracePeriodSeconds": 5, "containers": [{
            "name": "main", "image": TEST_IMAGE,
            "command": ["/bin/sh", "-c", TRAP_SCRIPT],
            "env": [
                {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MY_APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GREETING", "value": "hi $(MY_POD)"}
            ],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                          "limits": {"cpu": "500m", "memory": "64Mi"}},
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}
        }]}),
    );
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            all_running(p) && status_of(p, "main")["ready"] == true
        })
        .await;
    let first = status_of(&pod, "main")["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(pod["status"]["podIP"], "127.0.0.1");
    assert_eq!(pod["status"]["hostIP"], "127.0.0.1");
    assert_eq!(pod["status"]["qosClass"], "Burstable");
    let ready = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");
    let first_id = first.strip_prefix("containerd://").unwrap().to_owned();

    // Env resolved at creation, as kubelet.
    let client = cri();
    let out = client
        .exec_sync(&first_id, vec!["env".into()], Duration::from_secs(5))
        .await
        .unwrap();
    let env_text = String::from_utf8_lossy(&out.stdout).to_string();
    for want in [
        format!("MY_POD={name}"),
        format!("MY_APP={name}"),
        "MY_IP=127.0.0.1".to_owned(),
        format!("GREETING=hi {name}"),
    ] {
        assert!(env_text.lines().any(|l| l == want), "{want} in {env_text}");
    }
    // Resources per docs/kubelet-resize.md.
    let st = client.container_status(&first_id, false).await.unwrap();
    let res = st.status.unwrap().resources.unwrap().linux.unwrap();
    assert_eq!(
        (
            res.cpu_shares,
            res.cpu_quota,
            res.cpu_period,
            res.memory_limit_in_bytes
        ),
        (102, 50_000, 100_000, 64 << 20)
    );

    let stopped = Instant::now();
    client
        .stop_container(&first_id, Duration::from_secs(5))
        .await
        .unwrap();
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            let s = status_of(p, "main");
            s["restartCount"] == 1 && s["state"]["running"].is_object()
        })
        .await;
    let elapsed = stopped.elapsed();
    assert!(
        elapsed >= delay,
        "restarted after {elapsed:?}, delay {delay:?}"
    );
    let s = status_of(&pod, "main");
    assert_ne!(s["containerID"], json!(first));
    assert_eq!(s["lastState"]["terminated"]["containerID"], json!(first));
    assert_eq!(s["lastState"]["terminated"]["exitCode"], 0);

    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let runtime = env.kubelet().runtime_containers(uid).await.unwrap();
    let newest = &runtime[0];
    assert_eq!(newest.state, "running");
    assert_eq!(newest.attempt, 1);
    assert_eq!(newest.annotations[labels::CONTAINER_RESTART_COUNT], "1");
    assert_eq!(runtime[1].id, first_id);
    assert_eq!(
        runtime[1].annotations[labels::CONTAINER_HASH],
        newest.annotations[labels::CONTAINER_HASH]
    );
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn recreates_on_image_change_with_killing_event() {
    tag_image(&test_cri_endpoint(), TEST_IMAGE, "localhost/busybox:v2")
        .await
        .unwrap();
    let env = Env::start("v1.30.7", Duration::from_secs(2)).await;
    let name = unique_name("image");
    env.create_pod(
        &name,
        json!({"terminationGracePeriodSeconds": 3, "containers": [{
            "name": "main", "image": TEST_IMAGE,
            "command": ["/bin/sh", "-c", TRAP_SCRIPT]
        }]}),
    );
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), all_running)
        .await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    let before = env.kubelet().runtime_containers(&uid).await.unwrap()[0].clone();

    let client = node_sandbox::util::kube_client(&env.server.kubeconfig(None))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"containers": [{"name": "main", "image": "localhost/busybox:v2"}]}}),
        ),
    )
    .await
    .unwrap();
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            let s = status_of(p, "main");
            s["restartCount"] == 1 && s["state"]["running"].is_object()
        })
        .await;
    let runtime = env.kubelet().runtime_containers(&uid).await.unwrap();
    let after = &runtime[0];
    assert_ne!(after.id, before.id);
    assert_eq!(after.image, "localhost/busybox:v2");
    assert_ne!(
        after.annotations[labels::CONTAINER_HASH],
        before.annotations[labels::CONTAINER_HASH]
    );
    assert_eq!(after.annotations[labels::CONTAINER_RESTART_COUNT], "1");
    assert_eq!(status_of(&pod, "main")["image"], "localhost/busybox:v2");
    let events = env.server.store().list("events", NS);
    let killing: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "Killing" && e["involvedObject"]["name"] == name.as_str())
        .collect();
    assert_eq!(killing.len(), 1, "{events:#?}");
    assert_eq!(
        killing[0]["message"],
        "Container main definition changed, will be restarted"
    );
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn node_object_and_pod_deletion() {
    let env = Env::start("v1.30.7", Duration::from_secs(2)).await;
    let node = env.server.store().get("nodes", "", &env.node).unwrap();
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.30.7");
    assert!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("containerd://1.")
    );
    let addrs = node["status"]["addresses"].as_array().unwrap();
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "InternalIP" && a["address"] == "127.0.0.1")
    );

    let name = unique_name("delete");
    let created = env.create_pod(
        &name,
        json!({"terminationGracePeriodSeconds": 2, "containers": [{
            "name": "main", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", TRAP_SCRIPT]}]}),
    );
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    env.wait_pod(&name, Duration::from_secs(30), all_running)
        .await;
    // Graceful deletion: the pod stays with a deletionTimestamp until the kubelet finishes it.
    env.server.store().delete("pods", NS, &name).unwrap();
    wait_until(Duration::from_secs(30), "pod gone", || async {
        env.pod(&name).is_none()
    })
    .await;
    let sandboxes: HashMap<String, String> = cri()
        .list_pod_sandboxes(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.labels.get(labels::POD_UID) == Some(&uid))
        .map(|s| (s.id, s.labels[labels::POD_NAME].clone()))
        .collect();
    assert!(sandboxes.is_empty(), "{sandboxes:?}");
    assert_eq!(pod_cgroup_dirs(&uid), Vec::<std::path::PathBuf>::new());
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn restart_policy_never_and_init_containers() {
    let env = Env::start("v1.36.3", Duration::from_millis(500)).await;
    let name = unique_name("init");
    env.create_pod(
        &name,
        json!({"restartPolicy": "Never",
               "initContainers": [{"name": "init", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", "exit 0"]}],
               "containers": [{"name": "main", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", "exit 3"]}]}),
    );
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
    let init = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(init["state"]["terminated"]["exitCode"], 0);
    let main = status_of(&pod, "main");
    assert_eq!(main["state"]["terminated"]["exitCode"], 3);
    assert_eq!(main["restartCount"], 0);
    env.stop().await;
}

/// Ready needs every readiness gate's condition True, as kubelet's GeneratePodReadyCondition
/// has it (kruise pods gate on InPlaceUpdateReady); ContainersReady does not.
#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn ready_waits_for_readiness_gates() {
    let env = Env::start("v1.30.7", Duration::from_millis(500)).await;
    let name = unique_name("gated");
    env.create_pod(
        &name,
        json!({"readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
               "containers": [{"name": "main", "image": TEST_IMAGE,
                               "command": ["/bin/sh", "-c", TRAP_SCRIPT]}]}),
    );
    let condition = |pod: &Value, kind: &str| {
        pod.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .map(|c| c["status"].clone())
    };
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            condition(p, "ContainersReady") == Some(json!("True"))
        })
        .await;
    assert_eq!(
        condition(&pod, "Ready"),
        Some(json!("False")),
        "no gate condition yet"
    );
    let api: Api<Pod> = env.pods_api().await;
    let gate =
        json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(gate))
        .await
        .unwrap();
    env.wait_pod(&name, Duration::from_secs(30), |p| {
        condition(p, "Ready") == Some(json!("True"))
    })
    .await;
    env.stop().await;
}

/// Once the app containers have started, a sidecar that stops is restarted beside them, as
/// kubelet does (HasAnyRegularContainerStarted): the pod stays Initialized and the app container
/// keeps running.
#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_restarting_sidecar_leaves_the_pod_initialized() {
    let env = Env::start("v1.33.13", Duration::from_secs(2)).await;
    let name = unique_name("sidecar");
    env.create_pod(
        &name,
        json!({"terminationGracePeriodSeconds": 2,
               "initContainers": [{"name": "side", "image": TEST_IMAGE, "restartPolicy": "Always",
                                   "command": ["/bin/sh", "-c", TRAP_SCRIPT]}],
               "containers": [{"name": "main", "image": TEST_IMAGE,
                               "command": ["/bin/sh", "-c", TRAP_SCRIPT]}]}),
    );
    let initialized = |pod: &Value| {
        pod.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "Initialized"))
            .map(|c| (c["status"].clone(), c["lastTransitionTime"].clone()))
    };
    let sidecar_id = |pod: &Value| {
        pod["status"]["initContainerStatuses"][0]["containerID"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), all_running)
        .await;
    let before = initialized(&pod);
    assert_eq!(before.as_ref().map(|b| &b.0), Some(&json!("True")));
    let (side, main) = (
        sidecar_id(&pod),
        status_of(&pod, "main")["containerID"].clone(),
    );
    let side_id = side.strip_prefix("containerd://").unwrap().to_owned();
    cri()
        .stop_container(&side_id, Duration::from_secs(2))
        .await
        .unwrap();
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), |p| {
            let id = sidecar_id(p);
            !id.is_empty()
                && id != side
                && p["status"]["initContainerStatuses"][0]["state"]["running"].is_object()
        })
        .await;
    assert_eq!(initialized(&pod), before, "never de-initialized");
    assert_eq!(status_of(&pod, "main")["containerID"], main);
    assert_eq!(pod["status"]["phase"], "Running");
    env.stop().await;
}
